// The markers before a JPEG's first scan, read as prefetch/ops/gpu_decoders.py's jpeg_layout reads
// them (the same segments, the same first-or-last rules, the same stops): see jpeg_layout.h.
#include "jpeg_layout.h"

#include <cstring>

namespace prefetch {
namespace decode {

namespace {

// The frame markers: 0xC0-0xCF but DHT (0xC4), JPG (0xC8) and DAC (0xCC), which share the range.
bool is_sof(uint8_t marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// Tag 0x0112 (of type SHORT) of IFD0 of the TIFF structure in p[0, n), or -1 (_exif_orientation).
// Every read lies below n: offsets come from the data and are checked first, in 64 bits.
int64_t exif_orientation(const uint8_t* p, size_t n) {
  if (n < 8) return -1;
  bool big = false;
  if (p[0] == 'M' && p[1] == 'M') {
    big = true;
  } else if (!(p[0] == 'I' && p[1] == 'I')) {
    return -1;
  }
  auto u16 = [&](uint64_t i) -> uint64_t {
    return big ? (uint64_t{p[i]} << 8 | p[i + 1]) : (p[i] | uint64_t{p[i + 1]} << 8);
  };
  auto u32 = [&](uint64_t i) -> uint64_t {
    return big ? (u16(i) << 16 | u16(i + 2)) : (u16(i) | u16(i + 2) << 16);
  };
  if (u16(2) != 42) return -1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > n) return -1;
  const uint64_t count = u16(ifd);
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t entry = ifd + 2 + 12 * k;
    if (entry + 12 > n) break;
    if (u16(entry) == 0x0112) return u16(entry + 2) == 3 ? static_cast<int64_t>(u16(entry + 8)) : -1;
  }
  return -1;
}

}  // namespace

JpegLayout read_jpeg_layout(const uint8_t* b, size_t end) {
  JpegLayout layout;
  if (end < 4 || b[0] != 0xFF || b[1] != 0xD8) return layout;
  bool have_sof = false, have_exif = false;
  bool rgb_ids = false;  // the frame's component ids are exactly "R", "G", "B"
  size_t pos = 2;
  while (pos + 4 <= end) {
    if (b[pos] != 0xFF) break;
    const uint8_t marker = b[pos + 1];
    if (marker == 0xFF) {  // fill byte
      pos += 1;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      pos += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;  // start of scan, end of image: no more headers
    const size_t size = size_t{b[pos + 2]} << 8 | b[pos + 3];
    if (size < 2 || pos + 2 + size > end) break;
    const uint8_t* p = b + pos + 4;
    const size_t n = size - 2;
    if (is_sof(marker) && n >= 6 && !have_sof) {
      have_sof = true;
      layout.sof = marker;
      layout.precision = p[0];
      layout.height = int64_t{p[1]} << 8 | p[2];
      layout.width = int64_t{p[3]} << 8 | p[4];
      layout.components = p[5];
      // Python keeps the ids the segment holds (i with 6 + 3i < n): three of them, "R", "G", "B".
      rgb_ids = p[5] == 3 && n > 12 && p[6] == 82 && p[9] == 71 && p[12] == 66;
    } else if (marker == 0xE0 && n >= 5 && std::memcmp(p, "JFIF\0", 5) == 0) {
      layout.jfif = true;
    } else if (marker == 0xE1 && n >= 6 && std::memcmp(p, "Exif\0\0", 6) == 0 && !have_exif) {
      have_exif = true;  // the first EXIF segment counts, as in TorchCodec
      layout.orientation = exif_orientation(p + 6, n - 6);
    } else if (marker == 0xEE && n >= 12 && std::memcmp(p, "Adobe", 5) == 0) {
      layout.adobe_transform = p[11];
    }
    pos += 2 + size;
  }
  if (layout.components == 3 && !layout.jfif) {
    layout.rgb_coded = layout.adobe_transform >= 0 ? layout.adobe_transform == 0 : rgb_ids;
  }
  return layout;
}

}  // namespace decode
}  // namespace prefetch
