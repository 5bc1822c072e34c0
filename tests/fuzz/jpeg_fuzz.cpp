// libFuzzer target for the JPEG decoder (csrc/decode): the bytes of a file prefetch is handed by a
// Dataset are untrusted. Every input must read its header or throw JpegError, and decode (whole,
// and a window the input's last bytes choose) or throw JpegError: never crash, read out of
// bounds, leak or hang (ASan + UBSan with libFuzzer; scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "jpeg_decode.h"

using prefetch::decode::JpegError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  prefetch::decode::JpegHeader h;
  try {
    h = prefetch::decode::read_jpeg_header(data, size);
  } catch (const JpegError&) {
    return 0;
  }
  // The ops refuse headers past twice Pillow's pixel limit before decoding; the fuzzer keeps
  // its inputs far smaller, so that it spends its time on the parser, not on memset.
  if (h.height < 1 || h.width < 1 || h.height * h.width > (int64_t{1} << 20)) return 0;
  std::vector<uint8_t> out(static_cast<size_t>(h.height * h.width * 3));
  try {
    prefetch::decode::decode_jpeg_rgb(data, size, {0, 0, h.height, h.width}, out.data(), h.width * 3);
  } catch (const JpegError&) {
  }
  const uint8_t a = size > 0 ? data[size - 1] : 0, b = size > 1 ? data[size - 2] : 0;
  const int64_t top = a % h.height, left = b % h.width;
  const prefetch::decode::Region window{top, left, 1 + (a * 7) % (h.height - top), 1 + (b * 5) % (h.width - left)};
  try {
    prefetch::decode::decode_jpeg_rgb(data, size, window, out.data(), window.width * 3);
  } catch (const JpegError&) {
  }
  return 0;
}
