// What a JPEG's markers before its first scan say, read without libjpeg (torch-free): the frame
// header, JFIF and Adobe markers and the EXIF orientation. The GPU JPEG path reads every image's
// layout in one call per batch and screens out what nvJPEG cannot decode before calling it. The
// reading is prefetch/ops/gpu_decoders.py's jpeg_layout (the reference the tests compare with),
// byte for byte: a stream it cannot follow gives what was read so far, never reads past `size`.
#pragma once
#include <cstddef>
#include <cstdint>

namespace prefetch {
namespace decode {

// -1: not found (Python's None).
struct JpegLayout {
  int64_t sof = -1;              // the frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive
  int64_t precision = -1;        // bits per sample
  int64_t height = -1, width = -1;
  int64_t components = -1;
  bool jfif = false;             // an APP0 JFIF marker
  int64_t adobe_transform = -1;  // APP14 Adobe's colour transform (the last such marker's)
  int64_t orientation = -1;      // the first EXIF segment's orientation tag (1 = as stored)
  bool rgb_coded = false;        // three components stored as R, G, B (not YCbCr), as libjpeg decides
};

// The layout of the `size` bytes at `data` (any bytes: a truncated or corrupt stream is read as
// far as it can be followed).
JpegLayout read_jpeg_layout(const uint8_t* data, size_t size);

}  // namespace decode
}  // namespace prefetch
