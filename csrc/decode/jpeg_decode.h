// JPEG decoding, torch-free: the header of an encoded image, and its pixels (or only a region of
// them) as HWC uint8 RGB. libjpeg-turbo does the work; a region is decoded without the columns
// left and right of it (jpeg_crop_scanline) and without the inverse DCT of the rows above it
// (jpeg_skip_scanlines), and decoding stops below it. Built only where libjpeg-turbo >= 1.5 was
// found (PREFETCH_WITH_JPEG); elsewhere every call throws JpegError saying how to get it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace prefetch {
namespace decode {

// A bad, truncated or unsupported stream. what() is libjpeg's own message (or ours) without the
// sample: the caller knows which one it was decoding and names it.
class JpegError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JpegHeader {
  int64_t height = 0, width = 0;
  int components = 0;        // 1 grayscale, 3 YCbCr or RGB, 4 CMYK or YCCK
  bool progressive = false;
};

// The region of the image to decode, in pixels of the full image: rows [top, top + height),
// columns [left, left + width).
struct Region {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// True when this build can decode (libjpeg-turbo was found at build time).
bool jpeg_available();
// The libjpeg-turbo version this build uses ("2.1.5"), or why there is none.
std::string jpeg_library();

// Reads the header only (no pixel is decoded). Throws JpegError.
JpegHeader read_jpeg_header(const uint8_t* data, size_t size);

// Decodes `region` of the image as RGB (a grayscale image repeats its channel; a CMYK or YCCK
// image is converted as Pillow's convert("RGB") does) into `out`: region.height rows of
// region.width * 3 bytes, `out_row_stride` bytes apart. The region must lie inside the image
// (checked: JpegError otherwise). Throws JpegError for a bad or truncated stream; `out` is then
// partly written.
void decode_jpeg_rgb(const uint8_t* data, size_t size, const Region& region, uint8_t* out,
                     int64_t out_row_stride);

}  // namespace decode
}  // namespace prefetch
