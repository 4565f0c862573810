// Building and editing GGUF files byte by byte, for tests that need files no converter would write.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

// GGUF metadata value types (the ones these tests write).
enum GgufValueType : uint32_t {
  gguf_u32 = 4,
  gguf_i32 = 5,
  gguf_f32 = 6,
  gguf_string = 8,
  gguf_array = 9,
  gguf_u64 = 10
};

template <class T>
void append_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

inline void append_gguf_string(std::string& out, const std::string& s) {
  append_le<uint64_t>(out, s.size());
  out += s;
}

// A GGUF file assembled from raw parts: metadata entries, tensor infos, then data at `alignment`.
struct GgufBuilder {
  uint64_t n_kv = 0, n_tensors = 0;
  std::string kv, infos, data;

  GgufBuilder& u32(const std::string& key, uint32_t v) { return entry(key, gguf_u32, &v, 4); }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return entry(key, gguf_u64, &v, 8); }
  GgufBuilder& f32(const std::string& key, float v) { return entry(key, gguf_f32, &v, 4); }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& values) {
    std::string payload;
    for (const auto& v : values) append_gguf_string(payload, v);
    return array(key, gguf_string, values.size(), payload);
  }
  GgufBuilder& floats(const std::string& key, const std::vector<float>& values) {
    std::string payload;
    for (float v : values) append_le<float>(payload, v);
    return array(key, gguf_f32, values.size(), payload);
  }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    ++n_kv;
    append_gguf_string(kv, key);
    append_le<uint32_t>(kv, gguf_string);
    append_gguf_string(kv, v);
    return *this;
  }
  // An array header announcing `n` elements of `type`, followed by `payload` as the elements' bytes.
  GgufBuilder& array(const std::string& key, uint32_t type, uint64_t n, const std::string& payload = "") {
    ++n_kv;
    append_gguf_string(kv, key);
    append_le<uint32_t>(kv, gguf_array);
    append_le<uint32_t>(kv, type);
    append_le<uint64_t>(kv, n);
    kv += payload;
    return *this;
  }
  // dims in GGUF order (ne[0] first); ggml_type 0 = f32; offset from the start of the data section.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t ggml_type, uint64_t offset) {
    ++n_tensors;
    append_gguf_string(infos, name);
    append_le<uint32_t>(infos, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) append_le<uint64_t>(infos, d);
    append_le<uint32_t>(infos, ggml_type);
    append_le<uint64_t>(infos, offset);
    return *this;
  }
  std::string bytes(uint64_t alignment = 32) const {
    std::string out = "GGUF";
    append_le<uint32_t>(out, 3);
    append_le<uint64_t>(out, n_tensors);
    append_le<uint64_t>(out, n_kv);
    out += kv;
    out += infos;
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    return out + data;
  }

 private:
  GgufBuilder& entry(const std::string& key, uint32_t type, const void* v, size_t n) {
    ++n_kv;
    append_gguf_string(kv, key);
    append_le<uint32_t>(kv, type);
    kv.append(static_cast<const char*>(v), n);
    return *this;
  }
};

// Overwrites the value of the scalar metadata entry `key` (its type unchanged) in a GGUF file's bytes.
template <class T>
std::string with_gguf_value(std::string bytes, const std::string& key, T value) {
  std::string needle;
  append_gguf_string(needle, key);
  const size_t at = bytes.find(needle);
  if (at == std::string::npos) throw std::logic_error("no GGUF key " + key);
  std::memcpy(bytes.data() + at + needle.size() + 4, &value, sizeof(T));
  return bytes;
}

// Adds a metadata entry (its type and encoded value) to a GGUF file's bytes (version 3, 32-byte alignment), with a
// filler entry that keeps the tensor data where it was aligned.
inline std::string with_gguf_entry_added(std::string bytes, const std::string& key, GgufValueType type,
                                         const std::string& encoded) {
  std::string entries;
  append_gguf_string(entries, key);
  append_le<uint32_t>(entries, type);
  entries += encoded;
  const std::string filler_key = "test.filler";
  const size_t filler_fixed = 8 + filler_key.size() + 4 + 8;
  const size_t filler_len = (64 - (entries.size() + filler_fixed) % 32) % 32;
  append_gguf_string(entries, filler_key);
  append_le<uint32_t>(entries, gguf_string);
  append_gguf_string(entries, std::string(filler_len, ' '));
  constexpr size_t kHeader = 4 + 4 + 8 + 8;  // magic, version, tensor count, entry count
  uint64_t n_kv = 0;
  std::memcpy(&n_kv, bytes.data() + 16, 8);
  n_kv += 2;
  std::memcpy(bytes.data() + 16, &n_kv, 8);
  bytes.insert(kHeader, entries);
  return bytes;
}

inline std::string with_gguf_string_added(std::string bytes, const std::string& key, const std::string& value) {
  std::string encoded;
  append_gguf_string(encoded, value);
  return with_gguf_entry_added(std::move(bytes), key, gguf_string, encoded);
}

inline std::string with_gguf_f32_added(std::string bytes, const std::string& key, float value) {
  std::string encoded;
  append_le<float>(encoded, value);
  return with_gguf_entry_added(std::move(bytes), key, gguf_f32, encoded);
}

}  // namespace corolla::test
