// libjpeg-turbo behind jpeg_decode.h. libjpeg reports a fatal error by calling error_exit, which
// must not return: ours longjmps back to the setjmp of the function that made the call, which
// then throws. Between each setjmp and its longjmp only libjpeg's C frames run, and no object
// with a destructor is created after a setjmp, so the jump skips no destructor.
#include "jpeg_decode.h"

#ifdef PREFETCH_WITH_JPEG

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error "prefetch's JPEG decoding needs libjpeg-turbo >= 1.5 (jpeg_crop_scanline, jpeg_skip_scanlines)"
#endif

namespace prefetch {
namespace decode {

namespace {

#define PREFETCH_STRINGIFY2(x) #x
#define PREFETCH_STRINGIFY(x) PREFETCH_STRINGIFY2(x)

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
  bool corrupt;                      // pixel data was lost (see on_message)
  char corruption[JMSG_LENGTH_MAX];  // libjpeg's first such warning
};

void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorManager*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings: libjpeg goes on after corrupt data, filling what it lost with grey. Those are errors
// here (the pixels are not the image's): a stream that ends early, a marker where entropy-coded
// data should be (the rest of the scan is lost), a bad Huffman code, a lost restart marker.
// Pillow returns such images when the rest of the file parses (a grey or garbled band, no error);
// prefetch never hands out pixels it knows are wrong. Warnings that lose no pixel (extraneous
// bytes before a marker, common in real files) are ignored, as Pillow does.
void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace output
  auto* e = reinterpret_cast<ErrorManager*>(c->err);
  const int code = c->err->msg_code;
  if (code == JWRN_JPEG_EOF) e->truncated = true;
  if ((code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE || code == JWRN_MUST_RESYNC) && !e->corrupt) {
    e->corrupt = true;
    (*c->err->format_message)(c, e->corruption);
  }
  c->err->num_warnings++;
}

// One decompressor, destroyed with its scope (jpeg_destroy_decompress frees its memory pools).
class Decompressor {
 public:
  Decompressor() {
    std::memset(&cinfo, 0, sizeof cinfo);
    std::memset(&err, 0, sizeof err);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) throw JpegError(err.message);
    jpeg_create_decompress(&cinfo);
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  jpeg_decompress_struct cinfo;
  ErrorManager err;
};

JpegHeader header_of(const jpeg_decompress_struct& c) {
  JpegHeader h;
  h.height = c.image_height;
  h.width = c.image_width;
  h.components = c.num_components;
  h.progressive = c.progressive_mode != 0;
  return h;
}

void check_stream(const uint8_t* data, size_t size) {
  if (data == nullptr || size == 0) throw JpegError("empty input (0 bytes)");
}

// Pillow's CMYK to RGB (Convert.c, cmyk2rgb): each of R, G, B is (255 - K) scaled by
// (255 - C|M|Y) / 255, rounded as its MULDIV255. Pillow takes every CMYK JPEG's stored values as
// inverted (Photoshop's convention, "CMYK;I"), with or without Adobe's APP14 marker, and undoes
// that first; so does this.
inline uint8_t cmyk_channel(int ink, int nk) {
  const int t = ink * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v);
}

void cmyk_to_rgb(const uint8_t* in, uint8_t* out, int64_t pixels, bool inverted) {
  const int flip = inverted ? 255 : 0;
  for (int64_t x = 0; x < pixels; ++x, in += 4, out += 3) {
    const int nk = 255 - (in[3] ^ flip);
    out[0] = cmyk_channel(in[0] ^ flip, nk);
    out[1] = cmyk_channel(in[1] ^ flip, nk);
    out[2] = cmyk_channel(in[2] ^ flip, nk);
  }
}

void check_region(const JpegHeader& h, const Region& r) {
  if (r.height < 1 || r.width < 1 || r.top < 0 || r.left < 0 || r.top > h.height - r.height ||
      r.left > h.width - r.width) {
    throw JpegError("the region (top=" + std::to_string(r.top) + ", left=" + std::to_string(r.left) +
                    ", height=" + std::to_string(r.height) + ", width=" + std::to_string(r.width) +
                    ") is not inside the image of H x W = " + std::to_string(h.height) + " x " +
                    std::to_string(h.width));
  }
}

}  // namespace

bool jpeg_available() { return true; }

std::string jpeg_library() { return "libjpeg-turbo " PREFETCH_STRINGIFY(LIBJPEG_TURBO_VERSION); }

JpegHeader read_jpeg_header(const uint8_t* data, size_t size) {
  check_stream(data, size);
  Decompressor d;
  if (setjmp(d.err.jump)) throw JpegError(d.err.message);
  jpeg_mem_src(&d.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  return header_of(d.cinfo);
}

void decode_jpeg_rgb(const uint8_t* data, size_t size, const Region& region, uint8_t* out,
                     int64_t out_row_stride) {
  check_stream(data, size);
  Decompressor d;
  jpeg_decompress_struct& c = d.cinfo;
  if (setjmp(d.err.jump)) throw JpegError(d.err.message);
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  check_region(header_of(c), region);
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  if (!cmyk && c.num_components != 1 && c.num_components != 3) {
    throw JpegError("unsupported JPEG with " + std::to_string(c.num_components) +
                    " components (1 grayscale, 3 YCbCr/RGB or 4 CMYK/YCCK are decoded)");
  }
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&c);

  // Subsampled chroma is upsampled from its neighbours ("fancy" upsampling, as Pillow decodes):
  // at the edge of a cropped or skipped-to window libjpeg has no neighbour and repeats the edge,
  // so the pixels there differ from a full decode. The window therefore reaches one iMCU past the
  // region on each side, and only the region is kept: the same pixels as a full decode.
  const int64_t margin_x = static_cast<int64_t>(c.max_h_samp_factor) * DCTSIZE;
  const int64_t margin_y = static_cast<int64_t>(c.max_v_samp_factor) * DCTSIZE;
  const int64_t first_x = region.left > margin_x ? region.left - margin_x : 0;
  const int64_t last_x = std::min<int64_t>(region.left + region.width + margin_x, c.output_width);
  // Columns: libjpeg widens the window to whole iMCUs and says where it starts.
  JDIMENSION x0 = static_cast<JDIMENSION>(first_x), width = static_cast<JDIMENSION>(last_x - first_x);
  if (width < c.output_width) jpeg_crop_scanline(&c, &x0, &width);
  const int64_t channels = c.output_components;
  const int64_t skip = (region.left - static_cast<int64_t>(x0)) * channels;
  // Room for several rows a call: libjpeg returns at most one row group a call (2 rows for
  // 4:2:0's vertically subsampled chroma, 1 for 4:4:4, 4:2:2 and grayscale), so 4:2:0 files take
  // half the calls through its per-call path. The pixels are the same.
  constexpr JDIMENSION kRows = 16;
  JSAMPARRAY rows = (*c.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&c), JPOOL_IMAGE,
                                           static_cast<JDIMENSION>(width * channels), kRows);
  const int64_t first_y = region.top > margin_y ? region.top - margin_y : 0;
  if (first_y > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(first_y));
  auto lost = [&] { return d.err.truncated || d.err.corrupt; };
  auto read = [&](int64_t wanted) {  // up to min(wanted, kRows) rows into `rows`; how many came
    const JDIMENSION ask = static_cast<JDIMENSION>(std::min<int64_t>(wanted, kRows));
    return static_cast<int64_t>(jpeg_read_scanlines(&c, rows, ask));
  };
  for (int64_t y = first_y; y < region.top && !lost();) {
    const int64_t got = read(region.top - y);
    if (got == 0) break;
    y += got;
  }
  for (int64_t y = 0; y < region.height && !lost();) {
    const int64_t got = read(region.height - y);
    if (got == 0 || lost()) break;
    for (int64_t k = 0; k < got; ++k, ++y) {
      uint8_t* dst = out + y * out_row_stride;
      if (cmyk) {
        cmyk_to_rgb(rows[k] + skip, dst, region.width, /*inverted=*/true);
      } else {
        std::memcpy(dst, rows[k] + skip, static_cast<size_t>(region.width * 3));
      }
    }
  }
  if (d.err.truncated) throw JpegError("Premature end of JPEG file (the stream is truncated)");
  if (d.err.corrupt) throw JpegError(std::string(d.err.corruption) + " (the entropy-coded data is corrupt)");
  if (region.top + region.height == static_cast<int64_t>(c.output_height)) {
    // Every row was decoded: read the stream to its end, as a full decode by Pillow does, so that
    // a corrupt marker after the last row (a stray one inside the data ends the scan early, and
    // what follows is parsed as markers) is an error too. A stream that ends there without its
    // end marker has lost nothing (Pillow decodes it too): its warning is not an error here.
    jpeg_finish_decompress(&c);
    if (d.err.corrupt) throw JpegError(std::string(d.err.corruption) + " (the entropy-coded data is corrupt)");
  } else {
    // The rows below the region are never decoded: what they hold cannot change these pixels.
    jpeg_abort_decompress(&c);
  }
}

}  // namespace decode
}  // namespace prefetch

#else  // !PREFETCH_WITH_JPEG

namespace prefetch {
namespace decode {

namespace {
[[noreturn]] void unavailable() {
  throw JpegError(
      "this build of prefetch has no JPEG decoder: libjpeg-turbo >= 1.5 and its headers were not "
      "found when it was built. Install them (Debian/Ubuntu: apt install libjpeg-turbo8-dev or "
      "libjpeg62-turbo-dev; conda: conda install libjpeg-turbo) and rebuild (pip install "
      "--no-build-isolation -e .); prefetch.built_with_jpeg() says what the build found");
}
}  // namespace

bool jpeg_available() { return false; }
std::string jpeg_library() { return "none (libjpeg-turbo >= 1.5 was not found at build time)"; }
JpegHeader read_jpeg_header(const uint8_t*, size_t) { unavailable(); }
void decode_jpeg_rgb(const uint8_t*, size_t, const Region&, uint8_t*, int64_t) { unavailable(); }

}  // namespace decode
}  // namespace prefetch

#endif  // PREFETCH_WITH_JPEG
