#include "streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define PREFETCH_HAVE_SSE2_STREAM 1
#endif

namespace prefetch {

void copy_bytes(void* dst, const void* src, size_t bytes) {
#ifdef PREFETCH_HAVE_SSE2_STREAM
  if (bytes >= kStreamingCopyMinBytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    // Non-temporal stores need 16-byte aligned destinations: copy up to the next cache line.
    size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (size_t blocks = bytes / 64; blocks > 0; --blocks) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
      s += 64;
      d += 64;
    }
    std::memcpy(d, s, bytes % 64);
    // Streaming stores are weakly ordered: fence so that whoever is told "done" sees them.
    _mm_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace prefetch
