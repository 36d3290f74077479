#include "seqmix/train/serialization/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

#include "seqmix/util/files.h"

namespace seqmix::train {

namespace {

using json = nlohmann::json;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const char* const kKnownDtypes =
    "BOOL, U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64";

// The byte size of `shape` elements of `size` bytes each, or false when it does not fit in
// 64 bits (a crafted shape such as [2^40, 2^40] must not wrap around to a small number).
bool byte_size(const std::vector<int64_t>& shape, int64_t size, uint64_t& bytes) {
  bytes = static_cast<uint64_t>(size);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    bytes = 0;
    return true;
  }
  for (const int64_t d : shape) {
    const auto u = static_cast<uint64_t>(d);
    if (bytes > std::numeric_limits<uint64_t>::max() / u) return false;
    bytes *= u;
  }
  return true;
}

// Parses the header, refusing what nlohmann::json would otherwise accept silently: a name
// given twice (it keeps the last one, so two readers could disagree on which tensor a name
// holds) and nesting deeper than a header's three levels (object, entry, shape).
json parse_header(const char* first, const char* last, const std::string& what) {
  std::vector<std::set<std::string>> keys;  // the names seen in each open object
  struct Refused {
    std::string why;
  };
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event,
                                            json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > 2) throw Refused{"its header nests objects or lists deeper than a "
                                     "safetensors header does"};
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw Refused{"its header holds the name '" + parsed.get<std::string>() + "' twice" +
                        (depth > 1 ? " inside one object" : "")};
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(first, last, check);
  } catch (const Refused& r) {
    throw std::runtime_error(what + " is corrupt: " + r.why);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, ...": the part after the tag.
    std::string why = e.what();
    if (const size_t tag = why.find("] "); why.rfind("[json.", 0) == 0 && tag != why.npos)
      why.erase(0, tag + 2);
    throw std::runtime_error(what + " is corrupt: its header is not valid JSON (" + why + ")");
  }
}

// An unsigned 64-bit JSON integer, or false.
bool read_u64(const json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

}  // namespace

int64_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"U16", 2},  {"I16", 2},  {"F16", 2}, {"BF16", 2},    {"U32", 4},
      {"I32", 4},  {"F32", 4},  {"U64", 8}, {"I64", 8},     {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile parse_safetensors(std::string bytes, const std::string& path) {
  const std::string what = "safetensors file '" + path + "'";
  auto corrupt = [&](const std::string& why) {
    return std::runtime_error(what + " is corrupt: " + why);
  };
  if (bytes.size() < 8)
    throw corrupt("it holds " + std::to_string(bytes.size()) +
                  " bytes, fewer than the 8 of its header's length");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(k)]);
  const uint64_t after = bytes.size() - 8;
  if (n > kSafetensorsMaxHeader)
    throw corrupt("its header claims " + std::to_string(n) + " bytes, more than the " +
                  std::to_string(kSafetensorsMaxHeader) + " a safetensors header may hold");
  if (n > after)
    throw corrupt("its header claims " + std::to_string(n) + " bytes, the file holds " +
                  std::to_string(after) + " after the header's length (truncated?)");
  const json header = parse_header(bytes.data() + 8, bytes.data() + 8 + n, what);
  if (!header.is_object()) throw corrupt("its header is JSON but not an object");

  SafetensorsFile file;
  file.buffer_start = 8 + n;
  const uint64_t buffer = after - n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw corrupt("its \"__metadata__\" is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          throw corrupt("its \"__metadata__\" entry '" + key + "' is not a string");
        file.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    const std::string tensor = what + ": tensor '" + name + "'";
    if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") ||
        !entry.contains("shape") || !entry.contains("data_offsets"))
      throw std::runtime_error(tensor + " is not described by exactly \"dtype\", \"shape\" "
                               "and \"data_offsets\"");
    SafetensorsEntry e;
    e.name = name;
    const json& dtype = entry["dtype"];
    const int64_t size = dtype.is_string() ? safetensors_dtype_size(dtype.get<std::string>()) : 0;
    if (size == 0)
      throw std::runtime_error(tensor + " has dtype " + dtype.dump() +
                               "; safetensors dtypes are " + kKnownDtypes);
    e.dtype = dtype.get<std::string>();
    const json& shape = entry["shape"];
    if (!shape.is_array()) throw std::runtime_error(tensor + " has a shape that is not a list");
    for (const json& d : shape) {
      uint64_t v = 0;
      if (!read_u64(d, v) || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw std::runtime_error(tensor + " has shape " + shape.dump() +
                                 ": every size must be an integer >= 0");
      e.shape.push_back(static_cast<int64_t>(v));
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !read_u64(offsets[0], e.begin) ||
        !read_u64(offsets[1], e.end) || e.begin > e.end)
      throw std::runtime_error(tensor + " has data_offsets " + offsets.dump() +
                               "; they must be [begin, end], integers with 0 <= begin <= end");
    if (e.end > buffer)
      throw std::runtime_error(tensor + " has data_offsets " + offsets.dump() +
                               " past the end of the buffer (" + std::to_string(buffer) +
                               " bytes)");
    uint64_t need = 0;
    const bool fits = byte_size(e.shape, size, need);
    if (!fits || need != e.end - e.begin)
      throw std::runtime_error(
          tensor + " has shape " + shape_text(e.shape) + " and dtype " + e.dtype + " (" +
          (fits ? std::to_string(need) + " bytes" : "more bytes than 64 bits count") +
          ") but data_offsets " + offsets.dump() + " (" + std::to_string(e.end - e.begin) +
          " bytes)");
    file.tensors.push_back(std::move(e));
  }
  // The ranges, in buffer order, must tile the buffer: anything else is a file that was
  // cut, spliced or crafted so that two tensors share bytes.
  std::sort(file.tensors.begin(), file.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t at = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : file.tensors) {
    if (e.begin < at)
      throw std::runtime_error(what + ": tensor '" + e.name + "' starts at byte " +
                               std::to_string(e.begin) + " of the buffer, where tensor '" +
                               previous->name + "' ends at byte " + std::to_string(at) +
                               " (overlapping data_offsets)");
    if (e.begin > at)
      throw std::runtime_error(what + ": tensor '" + e.name + "' starts at byte " +
                               std::to_string(e.begin) + " of the buffer; bytes [" +
                               std::to_string(at) + ", " + std::to_string(e.begin) +
                               ") belong to no tensor");
    at = e.end;
    previous = &e;
  }
  if (at != buffer)
    throw corrupt("bytes [" + std::to_string(at) + ", " + std::to_string(buffer) +
                  ") at the end of its buffer belong to no tensor");
  file.bytes = std::move(bytes);
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const char* kind = util::file_type_description(path);
  if (!kind) throw std::runtime_error("safetensors file '" + path + "' does not exist");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw std::runtime_error("safetensors file '" + path + "' is " + kind +
                             ", not a regular file");
  std::string bytes;
  try {
    bytes = util::read_file(path);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("safetensors file '" + path + "' cannot be read (" + e.what() +
                             ")");
  }
  return parse_safetensors(std::move(bytes), path);
}

std::string safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsTensor*> order;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    const std::string what = "safetensors: tensor '" + t.name + "'";
    if (t.name.empty() || t.name == "__metadata__")
      throw std::invalid_argument("safetensors: a tensor may not be named '" + t.name + "'");
    if (!names.insert(t.name).second) throw std::invalid_argument(what + " is given twice");
    const int64_t size = safetensors_dtype_size(t.dtype);
    if (size == 0)
      throw std::invalid_argument(what + " has dtype '" + t.dtype + "'; safetensors dtypes are " +
                                  kKnownDtypes);
    for (const int64_t d : t.shape)
      if (d < 0) throw std::invalid_argument(what + " has shape " + shape_text(t.shape));
    uint64_t need = 0;
    if (!byte_size(t.shape, size, need) || need != t.nbytes)
      throw std::invalid_argument(what + " has shape " + shape_text(t.shape) + " and dtype " +
                                  t.dtype + " but " + std::to_string(t.nbytes) + " bytes");
    if (need > 0 && t.data == nullptr) throw std::invalid_argument(what + " has no data");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return safetensors_dtype_size(a->dtype) > safetensors_dtype_size(b->dtype);
  });
  // In buffer order, so that the header reads as the file lies.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto* t : order) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {at, at + t->nbytes}}};
    at += t->nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    throw std::invalid_argument(std::string("safetensors: cannot write the header: ") +
                                e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + at);
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((text.size() >> (8 * k)) & 0xff));
  out += text;
  for (const auto* t : order)
    if (t->nbytes) out.append(static_cast<const char*>(t->data), t->nbytes);
  return out;
}

}  // namespace seqmix::train
