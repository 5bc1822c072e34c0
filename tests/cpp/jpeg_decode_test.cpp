// The torch-free JPEG decoder (jpeg_decode.h) on streams encoded here with libjpeg's compression
// API: every chroma layout libjpeg writes (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1), grayscale, RGB,
// CMYK and YCCK, progressive, multi-scan sequential, arithmetic coding, restart markers, and sizes
// down to one pixel. A region must equal the same rows and columns of the full decode, byte for
// byte; bad, truncated and empty streams and regions outside the image throw JpegError; and
// decoding from several threads at once is safe (run under ThreadSanitizer by sanitize.sh thread).
// The pixels themselves are checked against Pillow by tests/test_decode.py.
#include "jpeg_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_util.h"

#ifdef PREFETCH_WITH_JPEG
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE
#include <cstdlib>

#include <jpeglib.h>
#endif

namespace prefetch {
namespace decode {
namespace {

#ifdef PREFETCH_WITH_JPEG

// --- Encoding, with libjpeg itself ---------------------------------------------------------------

struct Spec {
  std::string name;
  int height, width;
  J_COLOR_SPACE in_space;                // JCS_GRAYSCALE, JCS_RGB or JCS_CMYK (the pixels given)
  J_COLOR_SPACE jpeg_space = JCS_UNKNOWN;  // the coded colour space; JCS_UNKNOWN: libjpeg's default
  int h0 = 0, v0 = 0;                    // sampling factors of component 0 (0: libjpeg's default)
  bool progressive = false;
  bool multiscan = false;                // sequential, one scan per component
  bool arithmetic = false;
  int restart_rows = 0, restart_blocks = 0;
  int quality = 90;
};

int components_of(J_COLOR_SPACE s) { return s == JCS_GRAYSCALE ? 1 : s == JCS_CMYK ? 4 : 3; }

// A smooth image (sums of slow waves) with a little noise: compresses like a photo, and a swapped
// or shifted channel or row shows.
std::vector<uint8_t> source_pixels(const Spec& s) {
  const int C = components_of(s.in_space);
  std::vector<uint8_t> px(static_cast<size_t>(s.height) * s.width * C);
  std::mt19937 rng(static_cast<uint32_t>(s.height * 7919 + s.width * 31 + C));
  std::uniform_int_distribution<int> noise(-4, 4);
  for (int y = 0; y < s.height; ++y) {
    for (int x = 0; x < s.width; ++x) {
      for (int c = 0; c < C; ++c) {
        const double v = 128 + 70 * std::sin(0.045 * x * (c + 1) + 0.07 * y + 2 * c) +
                         40 * std::cos(0.05 * y * (c + 2) - 0.13 * x) + noise(rng);
        px[(static_cast<size_t>(y) * s.width + x) * C + c] =
            static_cast<uint8_t>(std::min(255.0, std::max(0.0, std::round(v))));
      }
    }
  }
  return px;
}

struct EncodeErrors {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void encode_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<EncodeErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg's state and output, in one heap object: the only state that a longjmp comes back to.
struct Encoder {
  jpeg_compress_struct cinfo;
  EncodeErrors err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  int components = 0;
  jpeg_scan_info scans[4];
};

// Runs libjpeg's compressor over `px`; false (with e->err.message) when libjpeg refuses. No local
// variable lives across the setjmp.
bool compress(Encoder* e, const Spec& s, const std::vector<uint8_t>& px) {
  jpeg_compress_struct& c = e->cinfo;
  c.err = jpeg_std_error(&e->err.pub);
  e->err.pub.error_exit = encode_error_exit;
  e->components = components_of(s.in_space);
  if (setjmp(e->err.jump)) return false;
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &e->buffer, &e->size);
  c.image_width = static_cast<JDIMENSION>(s.width);
  c.image_height = static_cast<JDIMENSION>(s.height);
  c.input_components = e->components;
  c.in_color_space = s.in_space;
  jpeg_set_defaults(&c);
  if (s.jpeg_space != JCS_UNKNOWN) jpeg_set_colorspace(&c, s.jpeg_space);
  jpeg_set_quality(&c, s.quality, TRUE);
  if (s.h0 > 0) {
    c.comp_info[0].h_samp_factor = s.h0;
    c.comp_info[0].v_samp_factor = s.v0;
    for (int k = 1; k < c.num_components; ++k) {
      c.comp_info[k].h_samp_factor = 1;
      c.comp_info[k].v_samp_factor = 1;
    }
  }
  if (s.progressive) jpeg_simple_progression(&c);
  if (s.multiscan) {
    for (int k = 0; k < c.num_components; ++k) e->scans[k] = jpeg_scan_info{1, {k, 0, 0, 0}, 0, 63, 0, 0};
    c.scan_info = e->scans;
    c.num_scans = c.num_components;
  }
  c.arith_code = s.arithmetic ? TRUE : FALSE;
  if (s.restart_rows > 0) c.restart_in_rows = s.restart_rows;
  if (s.restart_blocks > 0) c.restart_interval = static_cast<unsigned int>(s.restart_blocks);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + static_cast<size_t>(c.next_scanline) * s.width *
                                                        e->components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  return true;
}

// The stream libjpeg writes for `px` as `s` says (an empty vector and a test failure when libjpeg
// refuses).
std::vector<uint8_t> encode(const Spec& s, const std::vector<uint8_t>& px) {
  Encoder* e = new Encoder();
  std::vector<uint8_t> out;
  if (compress(e, s, px)) {
    out.assign(e->buffer, e->buffer + e->size);
  } else {
    ADD_FAILURE() << s.name << ": libjpeg could not encode: " << e->err.message;
  }
  jpeg_destroy_compress(&e->cinfo);
  std::free(e->buffer);
  delete e;
  return out;
}

std::vector<Spec> specs() {
  std::vector<Spec> v;
  auto add = [&](Spec s) { v.push_back(s); };
  add({"444", 37, 53, JCS_RGB, JCS_YCbCr, 1, 1});
  add({"422", 40, 61, JCS_RGB, JCS_YCbCr, 2, 1});
  add({"420", 45, 70, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"440", 43, 58, JCS_RGB, JCS_YCbCr, 1, 2});
  add({"411", 39, 75, JCS_RGB, JCS_YCbCr, 4, 1});
  add({"420_large", 131, 197, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"gray", 33, 47, JCS_GRAYSCALE});
  add({"gray_large", 90, 70, JCS_GRAYSCALE});
  add({"rgb_coded", 35, 44, JCS_RGB, JCS_RGB});
  add({"cmyk", 29, 38, JCS_CMYK});
  add({"cmyk_large", 70, 45, JCS_CMYK});
  add({"ycck_420", 50, 41, JCS_CMYK, JCS_YCCK, 2, 2});
  Spec p420{"progressive_420", 66, 50, JCS_RGB, JCS_YCbCr, 2, 2};
  p420.progressive = true;
  add(p420);
  Spec p444{"progressive_444", 41, 43, JCS_RGB, JCS_YCbCr, 1, 1};
  p444.progressive = true;
  add(p444);
  Spec pgray{"progressive_gray", 52, 39, JCS_GRAYSCALE};
  pgray.progressive = true;
  add(pgray);
  Spec pcmyk{"progressive_cmyk", 34, 27, JCS_CMYK};
  pcmyk.progressive = true;
  add(pcmyk);
  Spec multi{"multiscan_420", 60, 52, JCS_RGB, JCS_YCbCr, 2, 2};
  multi.multiscan = true;
  add(multi);
  Spec arith{"arithmetic_420", 58, 71, JCS_RGB, JCS_YCbCr, 2, 2};
  arith.arithmetic = true;
  add(arith);
  Spec arith_p{"arithmetic_progressive_422", 47, 55, JCS_RGB, JCS_YCbCr, 2, 1};
  arith_p.arithmetic = arith_p.progressive = true;
  add(arith_p);
  Spec rows{"restart_rows_420", 57, 75, JCS_RGB, JCS_YCbCr, 2, 2};
  rows.restart_rows = 1;
  add(rows);
  Spec blocks{"restart_blocks_422", 64, 49, JCS_RGB, JCS_YCbCr, 2, 1};
  blocks.restart_blocks = 3;
  add(blocks);
  add({"1x1_420", 1, 1, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"1x1_gray", 1, 1, JCS_GRAYSCALE});
  add({"1x1_cmyk", 1, 1, JCS_CMYK});
  add({"1x40_420", 1, 40, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"40x1_420", 40, 1, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"1x23_444", 1, 23, JCS_RGB, JCS_YCbCr, 1, 1});
  add({"23x1_411", 23, 1, JCS_RGB, JCS_YCbCr, 4, 1});
  add({"2x2_420", 2, 2, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"17x33_420", 17, 33, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"16x16_420", 16, 16, JCS_RGB, JCS_YCbCr, 2, 2});
  add({"33x17_440", 33, 17, JCS_RGB, JCS_YCbCr, 1, 2});
  Spec p1{"9x15_progressive_420", 9, 15, JCS_RGB, JCS_YCbCr, 2, 2};
  p1.progressive = true;
  add(p1);
  return v;
}

struct Encoded {
  Spec spec;
  std::vector<uint8_t> source, stream, full;  // full: the whole image decoded, HWC RGB
};

// Every spec encoded and decoded whole, once per process.
const std::vector<Encoded>& corpus() {
  static const std::vector<Encoded> all = [] {
    std::vector<Encoded> v;
    for (const Spec& s : specs()) {
      Encoded e;
      e.spec = s;
      e.source = source_pixels(s);
      e.stream = encode(s, e.source);
      e.full.assign(static_cast<size_t>(s.height) * s.width * 3, 0);
      if (!e.stream.empty()) {
        decode_jpeg_rgb(e.stream.data(), e.stream.size(), Region{0, 0, s.height, s.width}, e.full.data(),
                        int64_t{s.width} * 3);
      }
      v.push_back(std::move(e));
    }
    return v;
  }();
  return all;
}

std::string describe(const Region& r) {
  return "(top=" + std::to_string(r.top) + ", left=" + std::to_string(r.left) +
         ", height=" + std::to_string(r.height) + ", width=" + std::to_string(r.width) + ")";
}

// Boxes touching every edge and corner, one pixel at each corner and at random places, whole rows
// and columns, boxes starting and ending on and beside iMCU boundaries (8, 16 and 32 pixels:
// every sampling factor here), and random ones.
std::vector<Region> regions_of(int64_t H, int64_t W, uint32_t seed) {
  std::mt19937 rng(seed);
  auto rnd = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> boxes;
  auto add = [&](int64_t t, int64_t l, int64_t h, int64_t w) { boxes.insert({t, l, h, w}); };
  add(0, 0, H, W);
  for (auto [t, l] : {std::pair<int64_t, int64_t>{0, 0}, {0, W - 1}, {H - 1, 0}, {H - 1, W - 1}, {H / 2, W / 2}}) {
    add(t, l, 1, 1);
  }
  for (int i = 0; i < 10; ++i) add(rnd(0, H - 1), rnd(0, W - 1), 1, 1);
  add(0, 0, 1, W), add(H - 1, 0, 1, W), add(H / 2, 0, 1, W);
  add(0, 0, H, 1), add(0, W - 1, H, 1), add(0, W / 2, H, 1);
  for (int i = 0; i < 4; ++i) {
    const int64_t h = rnd(1, H), w = rnd(1, W);
    add(0, rnd(0, W - w), h, w);
    add(H - h, rnd(0, W - w), h, w);
    add(rnd(0, H - h), 0, h, w);
    add(rnd(0, H - h), W - w, h, w);
    add(H - h, W - w, h, w);
  }
  for (int64_t b : {7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 34, 47, 48, 49, 63, 64, 65, 100, 129}) {
    if (b < H) add(b, 0, rnd(1, H - b), W), add(0, 0, b, W), add(b, rnd(0, W - 1), 1, 1);
    if (b < W) add(0, b, H, rnd(1, W - b)), add(0, 0, H, b), add(rnd(0, H - 1), b, 1, 1);
  }
  for (int i = 0; i < 25; ++i) {
    const int64_t h = rnd(1, H), w = rnd(1, W);
    add(rnd(0, H - h), rnd(0, W - w), h, w);
  }
  std::vector<Region> out;
  for (auto [t, l, h, w] : boxes) out.push_back(Region{t, l, h, w});
  return out;
}

// Decodes `r` into rows `pad` bytes wider than the region, and checks that the padding is left
// alone and that the region equals the full decode's rows and columns.
void expect_region_equals_full(const Encoded& e, const Region& r, int64_t pad = 5) {
  const int64_t W = e.spec.width, stride = r.width * 3 + pad;
  std::vector<uint8_t> out(static_cast<size_t>(r.height * stride), 0xAB);
  decode_jpeg_rgb(e.stream.data(), e.stream.size(), r, out.data(), stride);
  for (int64_t y = 0; y < r.height; ++y) {
    const uint8_t* got = out.data() + y * stride;
    const uint8_t* want = e.full.data() + ((r.top + y) * W + r.left) * 3;
    if (std::memcmp(got, want, static_cast<size_t>(r.width * 3)) != 0) {
      int64_t i = 0;
      while (got[i] == want[i]) ++i;
      ADD_FAILURE() << e.spec.name << ": region " << describe(r) << " differs from the full decode at row "
                    << y << ", column " << i / 3 << ", channel " << i % 3 << ": " << int{got[i]}
                    << " != " << int{want[i]};
      return;
    }
    for (int64_t i = r.width * 3; i < stride; ++i) {
      if (got[i] != 0xAB) {
        ADD_FAILURE() << e.spec.name << ": region " << describe(r) << " wrote past its row " << y;
        return;
      }
    }
  }
}

// --- Tests ---------------------------------------------------------------------------------------

TEST(JpegDecode, IsAvailable) {
  EXPECT_TRUE(jpeg_available());
  EXPECT_NE(jpeg_library().find("libjpeg-turbo"), std::string::npos) << jpeg_library();
}

TEST(JpegDecode, HeaderHasTheEncodedSizeAndLayout) {
  for (const Encoded& e : corpus()) {
    SCOPED_TRACE(e.spec.name);
    ASSERT_FALSE(e.stream.empty());
    const JpegHeader h = read_jpeg_header(e.stream.data(), e.stream.size());
    EXPECT_EQ(h.height, e.spec.height);
    EXPECT_EQ(h.width, e.spec.width);
    EXPECT_EQ(h.components, components_of(e.spec.in_space));
    EXPECT_EQ(h.progressive, e.spec.progressive);
  }
}

// The whole image is close to what was encoded (lossy, so only roughly): no channel is swapped,
// no row or column shifted, grayscale repeats its channel, CMYK is converted as Pillow does for
// a file with Adobe's marker (libjpeg writes one for CMYK and YCCK): stored values inverted, then
// R = (255 - C)(255 - K) / 255 and so on.
TEST(JpegDecode, FullDecodeIsCloseToTheSource) {
  for (const Encoded& e : corpus()) {
    SCOPED_TRACE(e.spec.name);
    const int C = components_of(e.spec.in_space);
    const size_t pixels = static_cast<size_t>(e.spec.height) * e.spec.width;
    double err = 0;
    for (size_t p = 0; p < pixels; ++p) {
      const uint8_t* src = e.source.data() + p * C;
      const uint8_t* rgb = e.full.data() + p * 3;
      for (int c = 0; c < 3; ++c) {
        double want;
        if (C == 1) {
          want = src[0];
          ASSERT_EQ(rgb[c], rgb[0]) << "a grayscale pixel whose channels differ, at " << p;
        } else if (C == 3) {
          want = src[c];
        } else {
          want = src[c] * src[3] / 255.0;  // the stored values are read as inverted CMYK
        }
        err += std::fabs(rgb[c] - want);
      }
    }
    EXPECT_LT(err / (pixels * 3), 8.0);
  }
}

TEST(JpegDecode, RegionsEqualTheRowsAndColumnsOfTheFullDecode) {
  for (const Encoded& e : corpus()) {
    SCOPED_TRACE(e.spec.name);
    for (const Region& r : regions_of(e.spec.height, e.spec.width, static_cast<uint32_t>(e.stream.size()))) {
      expect_region_equals_full(e, r);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(JpegDecode, RowStrideEqualToTheRegionWidth) {
  const Encoded& e = corpus()[2];  // 4:2:0
  expect_region_equals_full(e, Region{3, 9, 20, 33}, 0);
  expect_region_equals_full(e, Region{0, 0, e.spec.height, e.spec.width}, 0);
}

// Where the first scan's entropy-coded data starts: past the SOS marker and its header.
size_t first_scan_data(const std::vector<uint8_t>& v) {
  for (size_t i = 2; i + 3 < v.size();) {
    if (v[i] != 0xFF) return 0;
    const size_t length = static_cast<size_t>(v[i + 2]) << 8 | v[i + 3];
    if (v[i + 1] == 0xDA) return i + 2 + length;
    i += 2 + length;
  }
  return 0;
}

TEST(JpegDecode, TruncatedStreamsThrow) {
  for (const Encoded& e : corpus()) {
    SCOPED_TRACE(e.spec.name);
    const int64_t H = e.spec.height, W = e.spec.width;
    std::vector<uint8_t> out(static_cast<size_t>(H * W * 3));
    const size_t n = e.stream.size(), data = first_scan_data(e.stream);
    ASSERT_GT(data, 0u);
    // Cut in the entropy-coded data: the header still reads, the pixels do not decode.
    for (size_t keep : {data + (n - data) * 2 / 3, n - std::min<size_t>(40, (n - data) / 2)}) {
      SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(n) + " bytes");
      const JpegHeader h = read_jpeg_header(e.stream.data(), keep);
      EXPECT_EQ(h.height, H);
      EXPECT_EQ(h.width, W);
      EXPECT_THROW(decode_jpeg_rgb(e.stream.data(), keep, Region{0, 0, H, W}, out.data(), W * 3), JpegError);
      // The last row needs the stream to its end.
      EXPECT_THROW(decode_jpeg_rgb(e.stream.data(), keep, Region{H - 1, 0, 1, W}, out.data(), W * 3),
                   JpegError);
    }
    // Cut inside the header (the tables, the frame): neither call gets through.
    for (size_t keep : {size_t{2}, size_t{3}, size_t{20}, size_t{100}}) {
      SCOPED_TRACE("kept " + std::to_string(keep) + " bytes");
      EXPECT_THROW(read_jpeg_header(e.stream.data(), keep), JpegError);
      EXPECT_THROW(decode_jpeg_rgb(e.stream.data(), keep, Region{0, 0, 1, 1}, out.data(), 3), JpegError);
    }
  }
}

TEST(JpegDecode, GarbageAndEmptyStreamsThrow) {
  std::mt19937 rng(5);
  std::vector<std::vector<uint8_t>> bad;
  bad.push_back({'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  bad.push_back({0xFF});
  bad.push_back({0xFF, 0xD8});                          // SOI only
  bad.push_back({0xFF, 0xD8, 0xFF, 0xD9});              // SOI, EOI: no image
  bad.push_back({0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13});
  for (int k = 0; k < 20; ++k) {                        // random bytes, with and without an SOI
    std::vector<uint8_t> v(static_cast<size_t>(1 + k * 97));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    if (k % 2 == 0 && v.size() >= 2) v[0] = 0xFF, v[1] = 0xD8;
    bad.push_back(v);
  }
  // A real header followed by garbage in place of the entropy-coded data.
  const Encoded& e = corpus()[2];
  const JpegHeader h = read_jpeg_header(e.stream.data(), e.stream.size());
  std::vector<uint8_t> out(static_cast<size_t>(h.height * h.width * 3));
  for (const std::vector<uint8_t>& v : bad) {
    SCOPED_TRACE("a stream of " + std::to_string(v.size()) + " bytes");
    try {
      read_jpeg_header(v.data(), v.size());
      ADD_FAILURE() << "read_jpeg_header did not throw";
    } catch (const JpegError& err) {
      EXPECT_GT(std::strlen(err.what()), 0u);
    }
    EXPECT_THROW(decode_jpeg_rgb(v.data(), v.size(), Region{0, 0, 1, 1}, out.data(), 3), JpegError);
  }
  EXPECT_THROW(read_jpeg_header(nullptr, 0), JpegError);
  EXPECT_THROW(read_jpeg_header(e.stream.data(), 0), JpegError);
  EXPECT_THROW(decode_jpeg_rgb(nullptr, 0, Region{0, 0, 1, 1}, out.data(), 3), JpegError);
  EXPECT_THROW(decode_jpeg_rgb(e.stream.data(), 0, Region{0, 0, 1, 1}, out.data(), 3), JpegError);
  try {
    read_jpeg_header(bad[0].data(), bad[0].size());
  } catch (const JpegError& err) {
    EXPECT_NE(std::string(err.what()).find("Not a JPEG"), std::string::npos) << err.what();
  }
  // The entropy-coded data replaced by random bytes: an error or some pixels, never a crash (run
  // under the sanitizers), and the header's size when it decodes.
  std::vector<uint8_t> scrambled = e.stream;
  size_t sos = 0;
  for (size_t i = 0; i + 1 < scrambled.size(); ++i) {
    if (scrambled[i] == 0xFF && scrambled[i + 1] == 0xDA) sos = i;
  }
  ASSERT_GT(sos, 0u);
  for (int k = 0; k < 10; ++k) {
    for (size_t i = sos + 20; i + 2 < scrambled.size(); ++i) scrambled[i] = static_cast<uint8_t>(rng());
    try {
      decode_jpeg_rgb(scrambled.data(), scrambled.size(), Region{0, 0, h.height, h.width}, out.data(),
                      h.width * 3);
    } catch (const JpegError&) {
    }
  }
}

// A marker where entropy-coded data should be ends the scan early: libjpeg warns and fills the
// rest with grey. That is an error, for every layout, whether the region holds the lost rows or
// the stream is read to its end after them; a region entirely above the corruption decodes, with
// the pixels of the intact stream.
TEST(JpegDecode, AMarkerInsideTheScanThrowsWhereItLosesPixels) {
  for (const Encoded& e : corpus()) {
    // Progressive and multi-scan files are read whole before the first row (a position 3/4 in
    // may even fall between their scans): tests/test_jpeg_untrusted.py holds them to Pillow's word.
    if (e.stream.empty() || e.spec.height < 32 || e.spec.progressive || e.spec.multiscan) continue;
    SCOPED_TRACE(e.spec.name);
    const int64_t H = e.spec.height, W = e.spec.width;
    const size_t data = first_scan_data(e.stream);
    ASSERT_GT(data, 0u);
    std::vector<uint8_t> broken = e.stream;
    const size_t at = data + (broken.size() - data) * 3 / 4;  // past the first rows' data
    broken[at] = 0xFF;
    broken[at + 1] = 0xC4;  // a DHT marker
    std::vector<uint8_t> out(static_cast<size_t>(H * W * 3));
    EXPECT_THROW(decode_jpeg_rgb(broken.data(), broken.size(), Region{0, 0, H, W}, out.data(), W * 3),
                 JpegError);
    std::vector<uint8_t> top(static_cast<size_t>(W * 3));
    decode_jpeg_rgb(broken.data(), broken.size(), Region{0, 0, 1, W}, top.data(), W * 3);
    EXPECT_TRUE(std::equal(top.begin(), top.end(), e.full.begin()));
  }
}

TEST(JpegDecode, RegionsOutsideTheImageThrowBeforeWritingAnything) {
  const Encoded& e = corpus()[2];
  const int64_t H = e.spec.height, W = e.spec.width;
  std::vector<uint8_t> out(static_cast<size_t>(H * W * 3 + 64), 0xCD);
  const int64_t big = int64_t{1} << 62;
  for (const Region& r : {Region{-1, 0, 1, 1}, Region{0, -1, 1, 1}, Region{0, 0, 0, 1}, Region{0, 0, 1, 0},
                          Region{0, 0, -5, 3}, Region{0, 0, H + 1, W}, Region{0, 0, H, W + 1},
                          Region{H, 0, 1, 1}, Region{0, W, 1, 1}, Region{H - 2, 0, 3, 1}, Region{0, W - 2, 1, 3},
                          Region{big, 0, 1, 1}, Region{0, 0, big, big}, Region{1, 1, INT64_MAX, 1},
                          Region{INT64_MIN, 0, 1, 1}, Region{0, 0, INT64_MIN, 1}}) {
    SCOPED_TRACE(describe(r));
    try {
      decode_jpeg_rgb(e.stream.data(), e.stream.size(), r, out.data(), W * 3);
      ADD_FAILURE() << "did not throw";
    } catch (const JpegError& err) {
      EXPECT_NE(std::string(err.what()).find("not inside"), std::string::npos) << err.what();
    }
  }
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xCD; }));
}

// Nothing is left behind by an error: the next decode gives the same pixels.
TEST(JpegDecode, ErrorsLeaveNothingBehind) {
  const Encoded& e = corpus()[5];  // 4:2:0, 131 x 197
  const int64_t H = e.spec.height, W = e.spec.width;
  std::vector<uint8_t> out(static_cast<size_t>(H * W * 3));
  for (int k = 0; k < 5; ++k) {
    EXPECT_THROW(decode_jpeg_rgb(e.stream.data(), e.stream.size() / 2, Region{0, 0, H, W}, out.data(), W * 3),
                 JpegError);
    EXPECT_THROW(decode_jpeg_rgb(e.stream.data() + 1, e.stream.size() - 1, Region{0, 0, H, W}, out.data(),
                                 W * 3),
                 JpegError);
    decode_jpeg_rgb(e.stream.data(), e.stream.size(), Region{0, 0, H, W}, out.data(), W * 3);
    EXPECT_EQ(out, e.full);
  }
}

// Several threads decode at once, each with its own streams, regions and errors (every decode has
// its own libjpeg state; ThreadSanitizer checks that nothing is shared).
TEST(JpegDecode, ConcurrentDecodes) {
  const std::vector<Encoded>& all = corpus();
  const int threads = 4, rounds = prefetch_test::scaled(30, 4);
  std::vector<int> failures(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(100 + t));
      std::vector<uint8_t> out;
      for (int i = 0; i < rounds; ++i) {
        const Encoded& e = all[(t * 7 + i) % all.size()];
        const int64_t H = e.spec.height, W = e.spec.width;
        auto rnd = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
        const int64_t h = rnd(1, H), w = rnd(1, W);
        const Region r{rnd(0, H - h), rnd(0, W - w), h, w};
        out.assign(static_cast<size_t>(h * w * 3), 0);
        try {
          const JpegHeader hd = read_jpeg_header(e.stream.data(), e.stream.size());
          if (hd.height != H || hd.width != W) ++failures[t];
          decode_jpeg_rgb(e.stream.data(), e.stream.size(), r, out.data(), w * 3);
        } catch (const JpegError&) {
          ++failures[t];
          continue;
        }
        for (int64_t y = 0; y < h; ++y) {
          if (std::memcmp(out.data() + y * w * 3, e.full.data() + ((r.top + y) * W + r.left) * 3,
                          static_cast<size_t>(w * 3)) != 0) {
            ++failures[t];
            break;
          }
        }
        if (i % 3 == 0) {  // and an error on the way
          try {
            decode_jpeg_rgb(e.stream.data(), 3, r, out.data(), w * 3);
            ++failures[t];
          } catch (const JpegError&) {
          }
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

#else  // !PREFETCH_WITH_JPEG

TEST(JpegDecode, WithoutLibjpegEveryCallThrows) {
  EXPECT_FALSE(jpeg_available());
  EXPECT_NE(jpeg_library().find("not found"), std::string::npos) << jpeg_library();
  const uint8_t soi[] = {0xFF, 0xD8, 0xFF, 0xD9};
  uint8_t out[3];
  try {
    read_jpeg_header(soi, sizeof soi);
    ADD_FAILURE() << "read_jpeg_header did not throw";
  } catch (const JpegError& e) {
    EXPECT_NE(std::string(e.what()).find("libjpeg-turbo"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_jpeg_rgb(soi, sizeof soi, Region{0, 0, 1, 1}, out, 3), JpegError);
}

#endif  // PREFETCH_WITH_JPEG

}  // namespace
}  // namespace decode
}  // namespace prefetch
