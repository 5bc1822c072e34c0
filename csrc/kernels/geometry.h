// The index math and element conversions shared by the CPU and CUDA kernels, so that the CPU
// tests exercise exactly the geometry the GPU runs. Torch-free; every function is
// __host__ __device__ under nvcc.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define PF_HD __host__ __device__ __forceinline__
#else
#define PF_HD inline
#endif

namespace prefetch {
namespace kernels {

// Python's // (floor division): the centred window of a crop larger than the image starts at a
// negative offset, and must match torch's (H - h) // 2.
PF_HD int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// An input batch of images (or masks with C = 1) described by sizes and element strides, so
// NHWC, NCHW and any non-contiguous view go through the same code.
struct Geometry {
  int64_t N = 0, C = 1, H = 0, W = 0;
  int64_t sN = 0, sC = 0, sH = 0, sW = 0;  // input strides, elements
  int64_t h = 0, w = 0;                    // output window
  // Gather: output sample n reads input sample rows[n] (the input has `sources` samples) instead
  // of sample n, so a batch is picked out of a whole resident dataset in the same pass.
  const int64_t* rows = nullptr;
  int64_t sources = 0;
};

// The input sample that output sample n reads.
PF_HD int64_t source_sample(const Geometry& g, int64_t n) { return g.rows != nullptr ? g.rows[n] : n; }

// Where one sample's window lies and how it is mirrored.
struct Window {
  int64_t top = 0, left = 0;
  bool vflip = false, hflip = false;
};

// offsets: [N, 2] int64 (top, left) or null for the centred window; flips: [N] bytes or null.
PF_HD Window sample_window(const Geometry& g, const int64_t* offsets, const uint8_t* hflip,
                           const uint8_t* vflip, int64_t n) {
  Window win;
  if (offsets != nullptr) {
    // Clamped to the window's reach: a window at top <= -h or top >= H reads no row of the
    // image either way, and with H, W < 2^62 (the op checks) no index sum below can overflow,
    // whatever int64 offset was given (2^63 - 1 + y would).
    const int64_t top = offsets[2 * n], left = offsets[2 * n + 1];
    win.top = top < -g.h ? -g.h : (top > g.H ? g.H : top);
    win.left = left < -g.w ? -g.w : (left > g.W ? g.W : left);
  } else {
    win.top = floor_div(g.H - g.h, 2);
    win.left = floor_div(g.W - g.w, 2);
  }
  win.hflip = hflip != nullptr && hflip[n] != 0;
  win.vflip = vflip != nullptr && vflip[n] != 0;
  return win;
}

// Input row read by output row y (may be outside [0, H): then the row is `fill`).
PF_HD int64_t source_row(const Geometry& g, const Window& win, int64_t y) {
  return win.top + (win.vflip ? g.h - 1 - y : y);
}

// Input column read by output column x (may be outside [0, W)).
PF_HD int64_t source_col(const Geometry& g, const Window& win, int64_t x) {
  return win.left + (win.hflip ? g.w - 1 - x : x);
}

// The output columns [*begin, *end), 0 <= begin <= end <= w, whose source column lies inside
// the image; the others take `fill`. Lets the CPU loops run their middle part without a bounds
// test per element.
PF_HD void inside_columns(const Geometry& g, const Window& win, int64_t* begin, int64_t* end) {
  int64_t b, e;
  if (!win.hflip) {  // 0 <= left + x < W
    b = -win.left;
    e = g.W - win.left;
  } else {  // 0 <= left + w - 1 - x < W
    b = win.left + g.w - g.W;
    e = win.left + g.w;
  }
  // Both ends within [0, w]: a window wholly beside the image puts b past w (hflip with
  // left > W, or left < -w), and the callers' fill loops run up to b.
  b = b < 0 ? 0 : (b > g.w ? g.w : b);
  e = e > g.w ? g.w : e;
  *begin = b;
  *end = e < b ? b : e;
}

// The element type of a mask of `bytes`-byte elements, for the CPU and CUDA flip_crop alike: the
// op only moves elements, never computes on them, so every dtype of a size is one of these. Calls
// f(T{}) with it and returns true; false for a size no kernel is instantiated for. Host code only
// (it picks a template instantiation), hence not PF_HD.
template <typename F>
inline bool with_mask_element(int bytes, F&& f) {
  if (bytes == 1) f(uint8_t{});
  else if (bytes == 2) f(int16_t{});
  else if (bytes == 4) f(int32_t{});
  else if (bytes == 8) f(int64_t{});
  else return false;
  return true;
}

// (x / 255 - mean) / std, folded into one multiply-add per element: scale = 1 / (255 std),
// bias = -mean / std, both computed in double and rounded once.
struct Affine {
  float scale, bias;
};

// CUDA and the AVX2 CPU build contract this into one fused multiply-add; the baseline CPU build
// rounds twice. Either is within 1e-6 of (v / 255 - mean) / std for |result| <= 1, and so within
// that of each other (docs/custom_ops.md, "CPU and GPU results").
PF_HD float normalize(uint8_t v, Affine a) { return static_cast<float>(v) * a.scale + a.bias; }

// The bits of a float (C++20's std::bit_cast; memcpy is the defined way to read them in C++17).
PF_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Round-to-nearest-even float -> bfloat16 / float16 bits, identical to CUDA's __float2bfloat16_rn
// and __float2half_rn (which device code uses directly).
PF_HD uint16_t float_to_bfloat16_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  const uint32_t u = float_bits(f);
  // Branch-free (so loops over it vectorise): NaN keeps a quiet-NaN pattern, everything else
  // rounds the 16 dropped bits to nearest even.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
#endif
}

PF_HD uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal or zero in half precision
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp - 150); in units of the smallest subnormal (2^-24): mant >> (126 - exp)
    const uint32_t shift = 126u - exp;
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t v = abs - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
#endif
}

}  // namespace kernels
}  // namespace prefetch
