// Tests of io_internal::LzfDecompress (src/io/lzf_decode.h) against liblzf's lzf_decompress: the
// same bytes and the same outcome (a size, or 0 for a damaged stream or a short buffer).
#include "io/lzf_decode.h"

#include <gtest/gtest.h>
#include <liblzf/lzf.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace homodyne::io_internal {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes Compress(const Bytes& input) {
  Bytes output(input.size() + input.size() / 16 + 64);
  const unsigned size = lzf_compress(input.data(), static_cast<unsigned>(input.size()),
                                     output.data(), static_cast<unsigned>(output.size()));
  EXPECT_GT(size, 0u);
  output.resize(size);
  return output;
}

// Decodes `stream` into a buffer of `capacity` bytes with both decoders and expects the same size
// and bytes; returns the size.
size_t ExpectSameAsLiblzf(const Bytes& stream, size_t capacity) {
  Bytes expected(capacity + 1), got(capacity + 64);
  const unsigned expected_size = lzf_decompress(stream.data(), static_cast<unsigned>(stream.size()),
                                                expected.data(), static_cast<unsigned>(capacity));
  const size_t got_size = LzfDecompress(stream.data(), stream.size(), got.data(), capacity);
  EXPECT_EQ(got_size, expected_size)
      << "stream of " << stream.size() << " bytes, capacity " << capacity;
  if (got_size == expected_size && got_size > 0) {
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got_size), 0);
  }
  return got_size;
}

// Inputs with every kind of run: noisy float32 values as in a beamline matrix, zeros (distance-1
// references), short periods (distances 2 to 15), text-like repeats (long and far references).
std::vector<Bytes> Inputs() {
  std::mt19937 generator(7);
  std::vector<Bytes> inputs;
  std::normal_distribution<float> noise(0.0f, 0.01f);
  for (size_t size : {1u, 2u, 31u, 32u, 33u, 100u, 4096u, 262144u}) {
    std::vector<float> values(size);
    for (size_t i = 0; i < size; ++i) {
      values[i] =
          (i % 11 < 4) ? 0.0f : 1.0f + 0.3f * static_cast<float>(i % 97) / 97.0f + noise(generator);
    }
    Bytes bytes(size * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    inputs.push_back(bytes);
  }
  inputs.push_back(Bytes(100000, 0));
  for (int period = 2; period < 20; ++period) {
    Bytes bytes(5000);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<unsigned char>(i % period * 37);
    inputs.push_back(bytes);
  }
  Bytes text;
  std::uniform_int_distribution<int> word(0, 40);
  for (int i = 0; i < 20000; ++i) {
    const int w = word(generator);
    for (int c = 0; c < 3 + w % 9; ++c)
      text.push_back(static_cast<unsigned char>('a' + (w + c) % 26));
    text.push_back(' ');
  }
  inputs.push_back(text);
  return inputs;
}

TEST(LzfDecodeTest, SameBytesAsLiblzf) {
  for (const Bytes& input : Inputs()) {
    const Bytes stream = Compress(input);
    const size_t size = ExpectSameAsLiblzf(stream, input.size());
    ASSERT_EQ(size, input.size());
    Bytes out(input.size() + 64);
    LzfDecompress(stream.data(), stream.size(), out.data(), input.size());
    EXPECT_EQ(std::memcmp(out.data(), input.data(), input.size()), 0);
    // Room to spare: the same size, nothing more.
    EXPECT_EQ(ExpectSameAsLiblzf(stream, input.size() + 100), input.size());
  }
}

TEST(LzfDecodeTest, ShortBufferFailsAsLiblzf) {
  for (const Bytes& input : Inputs()) {
    const Bytes stream = Compress(input);
    EXPECT_EQ(ExpectSameAsLiblzf(stream, input.size() - 1), 0u);
    if (input.size() > 40) {
      EXPECT_EQ(ExpectSameAsLiblzf(stream, input.size() / 2), 0u);
    }
  }
}

TEST(LzfDecodeTest, DamagedStreamsFailOrDecodeAsLiblzf) {
  std::mt19937 generator(3);
  const Bytes input = Inputs()[6];  // 262144 floats of noise and zeros
  const Bytes stream = Compress(input);
  // Cut anywhere, and single bytes changed: the outcome of liblzf's decoder, size and bytes.
  for (size_t cut : {size_t{1}, size_t{2}, stream.size() / 3, stream.size() - 1}) {
    ExpectSameAsLiblzf(Bytes(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(cut)),
                       input.size());
  }
  std::uniform_int_distribution<size_t> where(0, stream.size() - 1);
  std::uniform_int_distribution<int> value(0, 255);
  for (int trial = 0; trial < 200; ++trial) {
    Bytes damaged = stream;
    damaged[where(generator)] = static_cast<unsigned char>(value(generator));
    ExpectSameAsLiblzf(damaged, input.size());
  }
  // A back-reference before the start of the output: 0.
  const Bytes before_start = {0x20, 0x05};
  EXPECT_EQ(ExpectSameAsLiblzf(before_start, 100), 0u);
  // A run past the end of the input, a reference missing its distance byte: 0.
  EXPECT_EQ(ExpectSameAsLiblzf(Bytes{0x05, 'a', 'b'}, 100), 0u);
  EXPECT_EQ(ExpectSameAsLiblzf(Bytes{0x00, 'a', 0xe0}, 100), 0u);
  EXPECT_EQ(ExpectSameAsLiblzf(Bytes{0x00, 'a', 0x20}, 100), 0u);
}

}  // namespace
}  // namespace homodyne::io_internal
