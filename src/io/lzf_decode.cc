// LZF decompression with wider copies (lzf_decode.h).
#include "io/lzf_decode.h"

#include <cstring>

namespace homodyne::io_internal {

size_t LzfDecompress(const unsigned char* in, size_t in_size, unsigned char* out,
                     size_t out_capacity) {
  const unsigned char* ip = in;
  const unsigned char* const in_end = in + in_size;
  unsigned char* op = out;
  unsigned char* const out_end = out + out_capacity;
  while (ip < in_end) {
    const unsigned control = *ip++;
    if (control < 32) {  // a literal run of control + 1 bytes
      const size_t length = control + 1;
      if (static_cast<size_t>(out_end - op) < length || static_cast<size_t>(in_end - ip) < length) {
        return 0;
      }
      if (in_end - ip >= 32 && out_end - op >= 32) {
        std::memcpy(op, ip, 32);  // length <= 32: one fixed-size copy
      } else {
        std::memcpy(op, ip, length);
      }
      op += length;
      ip += length;
      continue;
    }
    size_t length = control >> 5;
    if (length == 7) {
      if (ip >= in_end) return 0;
      length += *ip++;
    }
    if (ip >= in_end) return 0;
    const size_t distance = ((control & 0x1fu) << 8) + *ip++ + 1;
    length += 2;
    if (static_cast<size_t>(out_end - op) < length || distance > static_cast<size_t>(op - out)) {
      return 0;
    }
    const unsigned char* ref = op - distance;
    unsigned char* const end = op + length;
    // A copy of W bytes reads only bytes written before it when distance >= W.
    if (distance >= 16 && static_cast<size_t>(out_end - op) >= length + 16) {
      do {
        std::memcpy(op, ref, 16);
        op += 16;
        ref += 16;
      } while (op < end);
    } else if (distance >= 8 && static_cast<size_t>(out_end - op) >= length + 8) {
      do {
        std::memcpy(op, ref, 8);
        op += 8;
        ref += 8;
      } while (op < end);
    } else if (distance == 1) {
      std::memset(op, *ref, length);
    } else {
      do {
        *op++ = *ref++;
      } while (op < end);
    }
    op = end;
  }
  return static_cast<size_t>(op - out);
}

}  // namespace homodyne::io_internal
