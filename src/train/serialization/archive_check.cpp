// The checks LibTorch archives pass before LibTorch reads them, and the checks of what it
// read (archive_check.h): the zip structure and CRCs, the format version, and every pickle
// run on an abstract machine that accepts only what seqmix and torch.save write.
#include "archive_check.h"

#include <torch/serialize/archive.h>
#include <caffe2/serialize/versions.h>
#include <zip.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace seqmix::train::detail {

namespace {

// ---------------------------------------------------------------------------------------
// Contents checks, before LibTorch reads the archive.
//
// LibTorch (torch::jit::load, behind InputArchive::load_from) trusts what the archive's
// pickles say and checks none of it against the records:
//  - a storage is made from its `data/<key>` record with the byte size the *pickle* states
//    (numel * itemsize), whatever the record's real size; a shortened or emptied record
//    becomes a storage that claims more bytes than were allocated, and every later read of
//    the tensor reads past the buffer;
//  - `_rebuild_tensor_v2` sets the recorded sizes, strides and storage offset without
//    comparing them with the storage;
//  - its unpickler pops empty stacks, indexes past the stack for odd SETITEMS counts or stale
//    MARKs, turns any integer into a ScalarType used as an array index, and allocates memo
//    tables as large as a 32-bit memo index asks;
//  - the source-range tables in `*.debug_pkl` are indexed without bounds checks when an error
//    message quotes the archive's TorchScript code, and that code (`code/*.py`) is compiled,
//    and would be run (`__setstate__`), as it is.
// None of this can be checked after the load (the over-read happens during or right after it),
// so the archive is checked first, by a validator that accepts only what LibTorch writes for
// a seqmix checkpoint: each pickle is run on an abstract stack machine that mirrors LibTorch's
// unpickler for the opcodes and globals LibTorch's pickler emits, rejects anything on which
// the real one would misbehave, and records every storage (its dtype, element count and
// record) and every tensor (sizes, strides, offset) with the name it is stored under; every
// storage's record must hold exactly the bytes its element count needs and every tensor must
// fit inside its storage. The TorchScript code must consist of the plain class declarations
// LibTorch writes for an archive (no methods). After the load every tensor is checked again
// against its storage (open_archive), and CheckpointFile::load checks dtypes, shapes and
// finiteness against the model.

// The deepest nesting of values accepted in a pickle (seqmix's are at most ~10 deep); bounds the
// recursion of destructors on both sides.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxDims = 16;
// The most values a plain pickle (Kind::kPlain) may hold, counted as a traversal visits them.
constexpr int64_t kMaxValues = int64_t{1} << 22;

struct PValue;
using PRef = std::shared_ptr<PValue>;

// A corrupt tensor: `path` is where it is stored, relative to the value holding it.
struct BadTensor {
  std::string path;
  std::string why;  ///< "needs N bytes but its storage holds M"
};

// A value on the abstract unpickler's stack. Dicts do not keep their items and lists keep
// only scalars and tensors, so no value can contain itself.
struct PValue {
  enum Kind { kInt, kFloat, kBool, kNone, kStr, kTuple, kList, kDict, kStorage, kTensor, kObject };
  Kind kind;
  int64_t i = 0;            ///< kInt
  std::string s;            ///< kStr; kStorage: its record
  std::vector<PRef> items;  ///< kTuple, kList
  int64_t nbytes = 0;       ///< kStorage, kTensor: bytes of the storage
  int64_t itemsize = 0;     ///< kStorage, kTensor
  int depth = 0;
  // Kind::kPlain only: values a traversal of this one visits (shared values counted each time
  // they are reached), and whether it was stored in another value (then it may not change).
  int64_t size = 1;
  bool frozen = false;
  std::shared_ptr<BadTensor> bad;  ///< the first corrupt tensor inside, if any
  explicit PValue(Kind k) : kind(k) {}
};

PRef make(PValue::Kind k) { return std::make_shared<PValue>(k); }

bool is_scalar_kind(PValue::Kind k) {
  return k == PValue::kInt || k == PValue::kFloat || k == PValue::kBool || k == PValue::kNone ||
         k == PValue::kStr || k == PValue::kTensor;
}

std::string join_ints(const std::vector<PRef>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]->i);
  return s + "]";
}

// Bytes of memory a tensor with these sizes, strides and storage offset reaches (0 for no
// elements), or -1 if a negative value or an overflow makes it impossible.
int64_t bytes_reached(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                      int64_t offset, int64_t itemsize) {
  if (offset < 0) return -1;
  int64_t numel = 1, last = offset, span = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) return -1;
    if (__builtin_mul_overflow(numel, sizes[d], &numel)) return -1;
    if (sizes[d] > 0 && (__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) ||
                         __builtin_add_overflow(last, span, &last)))
      return -1;
  }
  if (numel == 0) return 0;
  int64_t need = 0;
  if (__builtin_add_overflow(last, 1, &need) || __builtin_mul_overflow(need, itemsize, &need))
    return -1;
  return need;
}

// The scalar types a storage may have, and their pickled class names.
const std::vector<std::pair<std::string, at::ScalarType>>& storage_types() {
  static const std::vector<std::pair<std::string, at::ScalarType>> t = {
      {"FloatStorage", at::kFloat}, {"DoubleStorage", at::kDouble}, {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong}, {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort}, {"CharStorage", at::kChar}, {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool}};
  return t;
}

bool is_decimal(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// The abstract unpickler (see above). run() returns the pickle's value or throws
// std::runtime_error saying what is wrong with it.
class PickleChecker {
 public:
  // kPlain: a plain pickle as torch.save and torch::pickle_save write it (dicts, lists and
  // tuples of strings, numbers and tensors; torch::pickle_save's type tags), read by
  // torch::pickle_load. Dicts and lists may nest; a dict or list stored in another value may
  // not change afterwards (so no value can contain itself), and a traversal of the whole
  // value visits at most kMaxValues values.
  enum class Kind { kData, kConstants, kDebug, kPlain };
  PickleChecker(const ZipEntries& zip, std::string entry, const std::string& bytes, Kind kind)
      : zip_(zip), entry_(std::move(entry)), b_(bytes), kind_(kind) {}

  PRef run() {
    if (b_.size() < 2 || static_cast<uint8_t>(b_[0]) != 0x80 || b_[1] != 2)
      fail("does not start with pickle protocol 2");
    pos_ = 2;
    while (true) {
      if (pos_ >= b_.size()) fail("ends without a STOP opcode");
      at_ = pos_;
      const uint8_t op = static_cast<uint8_t>(b_[pos_++]);
      switch (op) {
        case '.': {  // STOP
          if (stack_.size() != 1) fail("leaves " + std::to_string(stack_.size()) + " values");
          PRef root = stack_[0];
          if (root->bad) {
            std::string path = root->bad->path;
            const auto dot = path.find('.');
            if (dot != std::string::npos) path[dot] = '/';  // "model/blocks.0.w"
            throw std::runtime_error("tensor '" + path + "' " + root->bad->why);
          }
          if (first_bad_) throw std::runtime_error(first_bad_->why);
          return root;
        }
        case '(': marks_.push_back(stack_.size()); break;
        case 't': {
          const size_t start = take_mark();
          auto t = make(PValue::kTuple);
          t->items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
          stack_.resize(start);
          push(finish_container(t));
          break;
        }
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          if (stack_.size() < n) fail_at("builds a tuple from too few values");
          auto t = make(PValue::kTuple);
          t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(finish_container(t));
          break;
        }
        case ')': push(make(PValue::kTuple)); break;
        case ']': push(make(PValue::kList)); break;
        case '}': push(make(PValue::kDict)); break;
        case 'e': {  // APPENDS
          const size_t start = take_mark();
          if (start == 0) fail_at("appends to nothing");
          for (size_t k = start; k < stack_.size(); ++k) append(stack_[start - 1], stack_[k]);
          stack_.resize(start);
          break;
        }
        case 'a': {  // APPEND: Python's pickler for a list of one element
          if (stack_.size() < 2) fail_at("appends to nothing");
          PRef item = pop();
          append(stack_.back(), item);
          break;
        }
        case 'u': {  // SETITEMS
          const size_t start = take_mark();
          if (start == 0) fail_at("sets items of nothing");
          if ((stack_.size() - start) % 2 != 0) fail_at("sets items from an odd number of values");
          PRef dict = stack_[start - 1];
          for (size_t k = start; k < stack_.size(); k += 2) set_item(dict, stack_[k], stack_[k + 1]);
          stack_.resize(start);
          break;
        }
        case 's': {  // SETITEM: Python's pickler for a dict of one item
          if (stack_.size() < 3) fail_at("sets items of nothing");
          PRef value = pop();
          PRef key = pop();
          set_item(stack_.back(), key, value);
          break;
        }
        case 'q': memo_put(u8()); break;   // BINPUT
        case 'r': memo_put(u32()); break;  // LONG_BINPUT
        case 'h': memo_get(u8()); break;   // BINGET
        case 'j': memo_get(u32()); break;  // LONG_BINGET
        case 'K': push_int(u8()); break;   // BININT1
        case 'M': push_int(u16()); break;  // BININT2
        case 'J': push_int(static_cast<int32_t>(u32())); break;  // BININT
        case 0x8a: {                                           // LONG1
          if (u8() != 8) fail_at("holds an integer that is not 8 bytes long");
          const uint64_t lo = u32();
          const uint64_t hi = u32();
          push_int(static_cast<int64_t>(lo | (hi << 32)));
          break;
        }
        case 'X': {  // BINUNICODE
          const uint32_t n = u32();
          need(n);
          auto s = make(PValue::kStr);
          s->s = b_.substr(pos_, n);
          pos_ += n;
          push(s);
          break;
        }
        case 'G': need(8); pos_ += 8; push(make(PValue::kFloat)); break;  // BINFLOAT
        case 0x88: case 0x89: push(make(PValue::kBool)); break;          // NEWTRUE, NEWFALSE
        case 'N': push(make(PValue::kNone)); break;
        case 'c': global(); break;
        case 0x81: pop(); break;  // NEWOBJ: drops the (empty) argument tuple
        case 'R': case 'b': reduce(); break;
        case 'Q': persistent_id(); break;
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail_at(std::string("has opcode ") + hex + ", which seqmix does not read");
        }
      }
    }
  }

 private:
  enum class Global { kClass, kRebuildTensor, kOrderedDict, kIntList, kTypeTag };
  const ZipEntries& zip_;
  std::string entry_;
  const std::string& b_;
  Kind kind_;
  size_t pos_ = 0, at_ = 0;
  std::vector<PRef> stack_;
  std::vector<size_t> marks_;
  std::vector<PRef> memo_;
  std::vector<Global> globals_;
  std::shared_ptr<BadTensor> first_bad_;

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("pickle '" + entry_ + "' " + why);
  }
  // list.append(item), for APPENDS and APPEND.
  void append(const PRef& list, const PRef& item) {
    if (list->kind != PValue::kList) fail_at("appends to a value that is not a list");
    if (list->frozen) fail_at("appends to a list after storing it");
    if (!is_scalar_kind(item->kind)) fail_at("appends a container to a list");
    grow(*list, *item);
    list->items.push_back(item);
    if (item->bad && !list->bad) list->bad = item->bad;
  }
  // dict[key] = value, for SETITEMS and SETITEM.
  void set_item(const PRef& dict, const PRef& key, const PRef& value) {
    if (kind_ == Kind::kPlain && dict->kind == PValue::kNone && dict->s == "OrderedDict")
      fail_at("holds a collections.OrderedDict, which seqmix's C++ reader cannot read (save "
              "a plain dict: torch.save(dict(model.state_dict()), f); seqmix.load in Python "
              "reads either)");
    if (dict->kind != PValue::kDict) fail_at("sets items of a value that is not a dict");
    if (dict->frozen) fail_at("sets items of a dict after storing it");
    if (key->kind != PValue::kStr) fail_at("uses a key that is not a string");
    if ((value->kind == PValue::kDict || value->kind == PValue::kList) && kind_ != Kind::kPlain)
      fail_at("stores a dict or list in a dict");
    grow(*dict, *value);
    dict->depth = std::max(dict->depth, value->depth + 1);
    if (dict->depth > kMaxDepth) fail_at("nests values too deeply");
    if (value->bad && !dict->bad)
      dict->bad = std::make_shared<BadTensor>(BadTensor{
          key->s + (value->bad->path.empty() ? "" : "." + value->bad->path), value->bad->why});
  }
  [[noreturn]] void fail_at(const std::string& why) const {
    fail(why + " (at byte " + std::to_string(at_) + ")");
  }
  void need(size_t n) const {
    if (b_.size() - pos_ < n) fail_at("is cut short");
  }
  uint32_t u8() {
    need(1);
    return static_cast<uint8_t>(b_[pos_++]);
  }
  uint32_t u16() { return u8() | (u8() << 8); }
  uint32_t u32() { return u16() | (u16() << 16); }
  void push(PRef v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t v) {
    auto p = make(PValue::kInt);
    p->i = v;
    push(p);
  }
  PRef pop() {
    if (stack_.empty()) fail_at("pops an empty stack");
    PRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  size_t take_mark() {
    if (marks_.empty()) fail_at("closes a MARK it never opened");
    const size_t start = marks_.back();
    marks_.pop_back();
    if (start > stack_.size()) fail_at("closes a MARK whose values were taken");
    return start;
  }
  void memo_put(uint32_t id) {
    if (stack_.empty()) fail_at("memoizes an empty stack");
    if (id > memo_.size()) fail_at("skips memo entries");
    if (id == memo_.size()) memo_.push_back(stack_.back());
    else memo_[id] = stack_.back();
  }
  void memo_get(uint32_t id) {
    if (id >= memo_.size()) fail_at("reads a memo entry it never wrote");
    push(memo_[id]);
  }
  // Kind::kPlain: `child` is stored in `parent`.
  void grow(PValue& parent, PValue& child) {
    if (kind_ != Kind::kPlain) return;
    if (child.kind == PValue::kDict || child.kind == PValue::kList) child.frozen = true;
    parent.size += child.size;
    if (parent.size > kMaxValues) fail_at("holds more than " + std::to_string(kMaxValues) + " values");
  }
  PRef finish_container(PRef t) {
    for (const PRef& e : t->items) {
      if (e->kind == PValue::kDict && kind_ != Kind::kPlain) fail_at("puts a dict in a tuple");
      grow(*t, *e);
      t->depth = std::max(t->depth, e->depth + 1);
      if (e->bad && !t->bad) t->bad = e->bad;
    }
    if (t->depth > kMaxDepth) fail_at("nests values too deeply");
    return t;
  }
  std::string line() {
    const size_t nl = b_.find('\n', pos_);
    if (nl == std::string::npos) fail_at("has an unterminated GLOBAL");
    std::string s = b_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  // The globals LibTorch writes: __torch__ classes (the archive's modules), tensors, storage
  // types, OrderedDict (a tensor's empty backward hooks), and int lists in debug records.
  void global() {
    const std::string module = line();
    const std::string name = line();
    auto push_global = [&](Global g) {
      globals_.push_back(g);
      push_int(static_cast<int64_t>(globals_.size() - 1));
    };
    const bool data = kind_ == Kind::kData || kind_ == Kind::kPlain;
    if (kind_ == Kind::kData && name == "Module" && is_module_qualifier(module)) {
      push_global(Global::kClass);
    } else if (data && module == "torch._utils" && name == "_rebuild_tensor_v2") {
      push_global(Global::kRebuildTensor);
    } else if (data && module == "collections" && name == "OrderedDict") {
      push_global(Global::kOrderedDict);
    } else if (kind_ == Kind::kDebug && module == "torch.jit._pickle" && name == "build_intlist") {
      push_global(Global::kIntList);
    } else if (kind_ == Kind::kPlain && module == "torch.jit._pickle" &&
               name == "restore_type_tag") {
      push_global(Global::kTypeTag);
    } else if (data && module == "torch") {
      for (const auto& [n, t] : storage_types())
        if (n == name) return push_int(static_cast<int64_t>(t));
      fail_at("names the unknown global 'torch." + name + "'");
    } else {
      fail_at("names the global '" + module + "." + name + "', which checkpoints do not use");
    }
  }

 public:
  // "__torch__" or "__torch__.___torch_mangle_<N>": the classes OutputArchive writes.
  static bool is_module_qualifier(const std::string& q) {
    if (q == "__torch__") return true;
    const std::string p = "__torch__.___torch_mangle_";
    return q.compare(0, p.size(), p) == 0 && is_decimal(q.substr(p.size()));
  }

 private:
  void reduce() {  // REDUCE and BUILD: LibTorch treats both as "call global on argument"
    if (stack_.size() < 2) fail_at("calls a global with too few values");
    std::swap(stack_[stack_.size() - 1], stack_[stack_.size() - 2]);
    const PRef index = pop();
    if (index->kind != PValue::kInt || index->i < 0 ||
        index->i >= static_cast<int64_t>(globals_.size()))
      fail_at("calls something that is not a global");
    PRef& arg = stack_.back();
    switch (globals_[static_cast<size_t>(index->i)]) {
      case Global::kClass: {
        if (arg->kind != PValue::kDict) fail_at("builds an object from a value that is not a dict");
        auto obj = make(PValue::kObject);
        obj->depth = arg->depth;
        obj->bad = arg->bad;
        arg = obj;
        break;
      }
      case Global::kOrderedDict:
        arg = make(PValue::kNone);
        arg->s = "OrderedDict";
        break;
      case Global::kTypeTag: {
        // restore_type_tag((container, type)): torch::pickle_save's type of a dict or list,
        // parsed by LibTorch's type parser: only the types seqmix's exports use are accepted.
        if (arg->kind != PValue::kTuple || arg->items.size() != 2 ||
            arg->items[1]->kind != PValue::kStr)
          fail_at("tags a type with arguments that are not (value, type)");
        const std::string& type = arg->items[1]->s;
        const PValue::Kind k = arg->items[0]->kind;
        bool known = false;
        for (const char* e : {"Any", "Tensor", "str", "int", "float", "bool"})
          known = known || (k == PValue::kDict && type == std::string("Dict[str, ") + e + "]") ||
                  (k == PValue::kList && type == std::string("List[") + e + "]");
        if (!known) fail_at("tags a value with the type '" + type + "', which seqmix does not read");
        arg = arg->items[0];
        break;
      }
      case Global::kIntList: {
        if (arg->kind != PValue::kTuple || arg->items.empty() ||
            arg->items[0]->kind != PValue::kList)
          fail_at("builds an int list from a value that is not a list");
        for (const PRef& e : arg->items[0]->items)
          if (e->kind != PValue::kInt) fail_at("builds an int list from values that are not ints");
        arg = arg->items[0];
        break;
      }
      case Global::kRebuildTensor: arg = rebuild_tensor(*arg); break;
    }
  }

  // torch._utils._rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks)
  PRef rebuild_tensor(const PValue& args) {
    if (args.kind != PValue::kTuple || args.items.size() != 6)
      fail_at("rebuilds a tensor from arguments that are not a 6-tuple");
    const PValue& storage = *args.items[0];
    const PValue& offset = *args.items[1];
    const PValue& sizes = *args.items[2];
    const PValue& strides = *args.items[3];
    if (storage.kind != PValue::kStorage) fail_at("rebuilds a tensor on something not a storage");
    if (offset.kind != PValue::kInt || sizes.kind != PValue::kTuple ||
        strides.kind != PValue::kTuple || args.items[4]->kind != PValue::kBool)
      fail_at("rebuilds a tensor from arguments of the wrong types");
    if (sizes.items.size() != strides.items.size() || sizes.items.size() > kMaxDims)
      fail_at("rebuilds a tensor with " + std::to_string(sizes.items.size()) + " sizes and " +
              std::to_string(strides.items.size()) + " strides");
    std::vector<int64_t> sz, st;
    for (size_t d = 0; d < sizes.items.size(); ++d) {
      if (sizes.items[d]->kind != PValue::kInt || strides.items[d]->kind != PValue::kInt)
        fail_at("rebuilds a tensor with sizes or strides that are not ints");
      sz.push_back(sizes.items[d]->i);
      st.push_back(strides.items[d]->i);
    }
    auto t = make(PValue::kTensor);
    t->nbytes = storage.nbytes;
    t->itemsize = storage.itemsize;
    t->s = storage.s;
    t->depth = 1;
    t->bad = storage.bad;
    if (!t->bad) {
      const int64_t need = bytes_reached(sz, st, offset.i, storage.itemsize);
      const std::string layout = "(sizes " + join_ints(sizes.items) + ", strides " +
                                 join_ints(strides.items) + ", storage offset " +
                                 std::to_string(offset.i) + ")";
      if (need < 0)
        mark_bad(t, "has impossible sizes, strides or offset " + layout);
      else if (need > storage.nbytes)
        mark_bad(t, "needs " + std::to_string(need) + " bytes " + layout +
                        " but its storage holds " + std::to_string(storage.nbytes));
    }
    return t;
  }

  // ('storage', <scalar type>, '<key>', 'cpu', numel): a storage read from data/<key>.
  void persistent_id() {
    const PRef id = pop();
    if (id->kind != PValue::kTuple || id->items.size() != 5)
      fail_at("names a storage with something that is not a 5-tuple");
    const auto& e = id->items;
    if (e[0]->kind != PValue::kStr || e[0]->s != "storage" || e[1]->kind != PValue::kInt ||
        e[2]->kind != PValue::kStr || e[3]->kind != PValue::kStr || e[4]->kind != PValue::kInt)
      fail_at("names a storage with values of the wrong types");
    const at::ScalarType* type = nullptr;
    for (const auto& st : storage_types())
      if (static_cast<int64_t>(st.second) == e[1]->i) type = &st.second;
    if (!type) fail_at("names a storage of unknown type " + std::to_string(e[1]->i));
    if (!is_decimal(e[2]->s)) fail_at("names a storage with the key '" + e[2]->s + "'");
    if (e[3]->s != "cpu") fail_at("names a storage on device '" + e[3]->s + "'");
    const std::string record = zip_.prefix + "data/" + e[2]->s;
    auto s = make(PValue::kStorage);
    s->itemsize = static_cast<int64_t>(c10::elementSize(*type));
    s->s = record;
    s->depth = 1;
    const int64_t numel = e[4]->i;
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / s->itemsize) {
      mark_bad(s, "has a storage of " + std::to_string(numel) + " elements");
    } else {
      s->nbytes = numel * s->itemsize;
      const auto it = zip_.sizes.find(record);
      // LibTorch reads no record for an empty storage.
      if (numel > 0 && it == zip_.sizes.end())
        mark_bad(s, "needs the record '" + record + "', which the archive lacks");
      else if (numel > 0 && it->second != static_cast<uint64_t>(s->nbytes))
        mark_bad(s, "needs " + std::to_string(s->nbytes) + " bytes but its storage '" + record +
                        "' holds " + std::to_string(it->second));
    }
    push(s);
  }

  void mark_bad(const PRef& v, const std::string& why) {
    v->bad = std::make_shared<BadTensor>(BadTensor{"", why});
    if (!first_bad_)
      first_bad_ = std::make_shared<BadTensor>(BadTensor{"", "a tensor on '" + v->s + "' " + why});
  }
};

// The TorchScript code LibTorch writes into an archive: class declarations only,
//   class Module(Module):
//     __parameters__ = ["weight", "bias", ]
//     __buffers__ = []
//     __annotations__ = []
//     __annotations__["params/0"] = str
//     name : TYPE
// with TYPE one of Tensor, int, float, str, bool, __torch__[.___torch_mangle_N].Module, or
// List/Optional/Tuple/Dict of those. Anything else (a method, an import, an expression) is
// refused: LibTorch compiles this code, runs `__setstate__` methods while it unpickles, and its
// type parser has crashed on corrupt code before.
class CodeChecker {
 public:
  explicit CodeChecker(std::string entry) : entry_(std::move(entry)) {}

  void check(const std::string& text) const {
    size_t pos = 0, line_no = 0;
    while (pos < text.size()) {
      ++line_no;
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      const std::string l = text.substr(pos, nl - pos);
      pos = nl + 1;
      if (!line_ok(l))
        throw std::runtime_error("code '" + entry_ + "' line " + std::to_string(line_no) +
                                 " is not a class declaration seqmix writes");
    }
  }

 private:
  std::string entry_;

  static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  static bool is_ident(const std::string& s) {
    if (s.empty() || s.size() > 200 || (s[0] >= '0' && s[0] <= '9')) return false;
    for (char c : s)
      if (!ident_char(c)) return false;
    return true;
  }
  // A quoted attribute name: printable ASCII but quotes and backslashes.
  static bool read_name(const std::string& l, size_t& i) {
    if (i >= l.size() || l[i] != '"') return false;
    ++i;
    const size_t start = i;
    while (i < l.size() && l[i] != '"') {
      if (l[i] < 0x20 || l[i] > 0x7e || l[i] == '\\') return false;
      ++i;
    }
    if (i >= l.size() || i == start) return false;
    ++i;
    return true;
  }
  static bool read_type(const std::string& l, size_t& i, int depth) {
    if (depth > 8) return false;
    size_t j = i;
    while (j < l.size() && (ident_char(l[j]) || l[j] == '.')) ++j;
    const std::string head = l.substr(i, j - i);
    i = j;
    if (head == "Tensor" || head == "int" || head == "float" || head == "str" || head == "bool")
      return true;
    if (head.size() > 7 && head.compare(head.size() - 7, 7, ".Module") == 0)
      return PickleChecker::is_module_qualifier(head.substr(0, head.size() - 7));
    int min_args = 1, max_args = 1;
    if (head == "Dict") min_args = max_args = 2;
    else if (head == "Tuple") max_args = 16;
    else if (head != "List" && head != "Optional") return false;
    if (i >= l.size() || l[i] != '[') return false;
    ++i;
    int n = 0;
    while (true) {
      if (!read_type(l, i, depth + 1)) return false;
      ++n;
      if (i < l.size() && l[i] == ']') break;
      if (l.compare(i, 2, ", ") != 0) return false;
      i += 2;
    }
    ++i;
    return n >= min_args && n <= max_args;
  }
  static bool line_ok(const std::string& l) {
    if (l.empty()) return true;
    if (l.compare(0, 6, "class ") == 0) {
      const size_t p = l.find('(');
      return p != std::string::npos && is_ident(l.substr(6, p - 6)) &&
             l.compare(p, std::string::npos, "(Module):") == 0;
    }
    if (l.compare(0, 2, "  ") != 0) return false;
    if (l == "  __annotations__ = []") return true;
    for (const char* list : {"  __parameters__ = [", "  __buffers__ = ["}) {
      const size_t n = std::strlen(list);
      if (l.compare(0, n, list) != 0) continue;
      size_t i = n;
      while (i < l.size() && l[i] == '"') {
        if (!read_name(l, i) || l.compare(i, 2, ", ") != 0) return false;
        i += 2;
      }
      return i + 1 == l.size() && l[i] == ']';
    }
    size_t i;
    if (l.compare(0, 18, "  __annotations__[") == 0) {
      i = 18;
      if (!read_name(l, i) || l.compare(i, 4, "] = ") != 0) return false;
      i += 4;
    } else {
      const size_t colon = l.find(" : ");
      if (colon == std::string::npos || !is_ident(l.substr(2, colon - 2))) return false;
      i = colon + 3;
    }
    return read_type(l, i, 0) && i == l.size();
  }
};

// A source-range table (code/*.py.debug_pkl) as torch::jit::ConcreteSourceRangeUnpickler
// reads it, with the bounds it does not check: ("FORMAT_WITH_STRING_TABLE", (text, ...),
// ((offset, ((text index list, file index, line), start, end), tag), ...)).
void check_debug_table(const PValue& root, const std::string& entry) {
  auto bad = [&](const std::string& why) {
    return std::runtime_error("source-range table '" + entry + "' " + why);
  };
  if (root.kind != PValue::kTuple || root.items.size() != 3 ||
      root.items[0]->kind != PValue::kStr || root.items[0]->s != "FORMAT_WITH_STRING_TABLE" ||
      root.items[1]->kind != PValue::kTuple || root.items[2]->kind != PValue::kTuple)
    throw bad("is not a string table and its ranges");
  const auto& texts = root.items[1]->items;
  if (texts.empty()) throw bad("has no strings");
  for (const PRef& t : texts)
    if (t->kind != PValue::kStr) throw bad("has a string table entry that is not a string");
  auto index_ok = [&](const PRef& v) {
    return v->kind == PValue::kInt && v->i >= 0 && v->i < static_cast<int64_t>(texts.size());
  };
  for (const PRef& r : root.items[2]->items) {
    if (r->kind != PValue::kTuple || r->items.size() < 2 || r->items.size() > 3 ||
        r->items[0]->kind != PValue::kInt)
      throw bad("has a record that is not (offset, range[, tag])");
    const PValue& range = *r->items[1];
    if (range.kind != PValue::kTuple || range.items.size() != 3 ||
        range.items[1]->kind != PValue::kInt || range.items[2]->kind != PValue::kInt)
      throw bad("has a range that is not (source, start, end)");
    const PValue& source = *range.items[0];
    if (source.kind != PValue::kTuple || source.items.size() != 3 ||
        source.items[0]->kind != PValue::kList || !index_ok(source.items[1]) ||
        source.items[2]->kind != PValue::kInt)
      throw bad("has a source that is not (text indices, file index, line)");
    for (const PRef& k : source.items[0]->items)
      if (!index_ok(k)) throw bad("indexes past its string table");
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The byteorder record PyTorch 2.x writes beside the tensors ("little"; older archives have
// none, and LibTorch then reads them as little-endian).
void verify_byteorder(const ZipEntries& zip) {
  const auto order = zip.texts.find(zip.prefix + "byteorder");
  if (order != zip.texts.end() && order->second != "little")
    throw std::runtime_error("its tensors are stored '" + order->second +
                             "'-endian; seqmix reads little-endian ones");
}

}  // namespace

// `noun` names the file ("checkpoint", "export"), `not_a` what it should have been.
std::runtime_error corrupt_checkpoint(const std::string& path, const std::string& why,
                                      const std::string& noun, const std::string& not_a) {
  return std::runtime_error(noun + " '" + path + "' is corrupt or not " + not_a + " (" + why +
                            ")");
}

// A checkpoint whose zip is sound but whose contents are not.
std::runtime_error corrupt_contents(const std::string& path, const std::string& why,
                                    const std::string& noun) {
  return std::runtime_error(noun + " '" + path + "' is corrupt: " + why);
}

namespace {

// Whether `name` is a tensor record (`<prefix>data/<key>`).
bool is_tensor_record(const ZipEntries& z, const std::string& name) {
  return name.compare(0, z.prefix.size() + 5, z.prefix + "data/") == 0;
}

}  // namespace

// Reads every entry of the zip archive through libzip, which checks the archive's structure
// (ZIP_CHECKCONS) and each entry's CRC-32. LibTorch's own reader checks neither and goes on to
// parse the archive's TorchScript type definitions, which can crash on corrupt bytes (found by
// fuzz/fuzz_checkpoint: a segfault in torch::jit::ScriptTypeParser).
ZipEntries verify_archive(const std::string& path, const std::string& noun,
                          const std::string& not_a) {
  auto corrupt = [&](const std::string& why) { return corrupt_checkpoint(path, why, noun, not_a); };
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw corrupt("zip: " + why);
  }
  std::unique_ptr<zip_t, void (*)(zip_t*)> guard(z, zip_discard);
  const zip_int64_t n = zip_get_num_entries(z, 0);
  if (n <= 0) throw corrupt("zip: the archive is empty");
  ZipEntries out;
  std::vector<char> buf(1 << 20);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* cname = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    const std::string name = cname ? cname : "?";
    if (i == 0) {
      // As LibTorch finds it: the folder of the first entry.
      const auto slash = name.find('/');
      if (slash == std::string::npos || slash == 0)
        throw corrupt("zip entry '" + name + "' is not in a folder");
      out.prefix = name.substr(0, slash + 1);
    }
    if (out.sizes.count(name)) throw corrupt("zip entry '" + name + "' appears twice");
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    if (!f) throw corrupt("zip: " + std::string(zip_strerror(z)));
    const bool keep = !is_tensor_record(out, name);
    std::string text;
    uint64_t total = 0;
    zip_int64_t got;
    while ((got = zip_fread(f, buf.data(), buf.size())) > 0) {
      total += static_cast<uint64_t>(got);
      if (keep) text.append(buf.data(), static_cast<size_t>(got));
    }
    const std::string why = got < 0 ? zip_file_strerror(f) : "";
    zip_fclose(f);
    if (got < 0) throw corrupt("zip entry '" + name + "': " + why);
    out.sizes[name] = total;
    if (keep) out.texts[name] = std::move(text);
  }
  return out;
}

// The archive format version, as LibTorch's reader takes it (PyTorchStreamReader::init): the
// decimal number in `.data/version` if the archive has one, else in `version`. LibTorch
// writes kMinProducedFileFormatVersion (3) for an archive of tensors and reads
// kMinSupportedFileFormatVersion..kMaxSupportedFileFormatVersion (1..10); outside that range it
// throws its own "please upgrade PyTorch" error, and it parses the record with std::stoull,
// which takes a sign, leading blanks and trailing text. Only the digits LibTorch writes (and
// its newline) are accepted here.
void verify_version(const std::string& path, const ZipEntries& zip,
                    const std::string& noun) {
  std::string record = zip.prefix + ".data/version";
  if (!zip.texts.count(record)) record = zip.prefix + "version";
  const auto it = zip.texts.find(record);
  if (it == zip.texts.end())
    throw corrupt_contents(path, "entry '" + record + "' is missing", noun);
  std::string text = it->second;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const bool digits = !text.empty() && text.size() <= 40 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    throw corrupt_contents(path, "its version record '" + record + "' is not a decimal number",
                           noun);
  const size_t nz = std::min(text.find_first_not_of('0'), text.size() - 1);
  const std::string shown = text.substr(nz);  // "003" -> "3", "0" stays
  constexpr uint64_t lo = caffe2::serialize::kMinSupportedFileFormatVersion;
  constexpr uint64_t hi = caffe2::serialize::kMaxSupportedFileFormatVersion;
  const bool in_range = shown.size() <= 18 && std::stoull(shown) >= lo && std::stoull(shown) <= hi;
  if (!in_range)
    throw std::runtime_error(noun + " '" + path + "' has archive format version " + shown +
                             "; this seqmix reads versions " + std::to_string(lo) + ".." +
                             std::to_string(hi));
}

// Everything LibTorch will read from the archive, checked before it reads it (see above).
// PyTorch 2.x adds `byteorder` and `.data/serialization_id` (a random id of the save) to what
// earlier releases wrote; archives without them (PyTorch 1.x's torch.save) are read as well.
void verify_contents(const std::string& path, const ZipEntries& zip) {
  const std::string& p = zip.prefix;
  try {
    for (const auto& [name, size] : zip.sizes) {
      const std::string rel = name.compare(0, p.size(), p) == 0 ? name.substr(p.size()) : "";
      const bool known = rel == "version" || rel == ".data/version" || rel == "data.pkl" ||
                         rel == "constants.pkl" || rel == "byteorder" ||
                         rel == ".data/serialization_id" ||
                         (rel.compare(0, 5, "data/") == 0 && is_decimal(rel.substr(5))) ||
                         (rel.compare(0, 5, "code/") == 0 &&
                          (ends_with(rel, ".py") || ends_with(rel, ".py.debug_pkl")));
      if (!known) throw std::runtime_error("entry '" + name + "' is not part of a checkpoint");
    }
    verify_byteorder(zip);
    for (const char* required : {"data.pkl", "constants.pkl"})
      if (!zip.texts.count(p + required))
        throw std::runtime_error("entry '" + p + required + "' is missing");
    for (const auto& [name, text] : zip.texts) {
      if (ends_with(name, ".py")) {
        CodeChecker(name).check(text);
      } else if (ends_with(name, ".debug_pkl")) {
        check_debug_table(*PickleChecker(zip, name, text, PickleChecker::Kind::kDebug).run(), name);
      } else if (name == p + "constants.pkl") {
        const PRef c = PickleChecker(zip, name, text, PickleChecker::Kind::kConstants).run();
        if (c->kind != PValue::kTuple || !c->items.empty())
          throw std::runtime_error("pickle '" + name + "' holds constants; checkpoints have none");
      } else if (name == p + "data.pkl") {
        const PRef root = PickleChecker(zip, name, text, PickleChecker::Kind::kData).run();
        if (root->kind != PValue::kObject)
          throw std::runtime_error("pickle '" + name + "' does not hold a module");
      }
    }
  } catch (const std::runtime_error& e) {
    throw corrupt_contents(path, e.what());
  }
}

// A plain pickle's archive (torch.save, torch::pickle_save), checked before torch::pickle_load
// reads it: only data.pkl, data/<n>, the version records and (newer PyTorch) byteorder,
// .data/serialization_id, .format_version and .storage_alignment (PyTorch 2.x's torch.save:
// small decimal records); data.pkl run on the abstract unpickler (Kind::kPlain) must hold a
// dict.
void verify_plain_contents(const std::string& path, const ZipEntries& zip,
                           const std::string& noun) {
  const std::string& p = zip.prefix;
  try {
    for (const auto& [name, size] : zip.sizes) {
      const std::string rel = name.compare(0, p.size(), p) == 0 ? name.substr(p.size()) : "";
      const bool known = rel == "version" || rel == ".data/version" || rel == "data.pkl" ||
                         rel == "byteorder" || rel == ".data/serialization_id" ||
                         (rel.compare(0, 5, "data/") == 0 && is_decimal(rel.substr(5)));
      const bool decimal_record = rel == ".format_version" || rel == ".storage_alignment";
      if (decimal_record) {
        const std::string& text = zip.texts.at(name);
        if (text.empty() || text.size() > 20 || !is_decimal(text))
          throw std::runtime_error("entry '" + name + "' is not a decimal number");
      }
      if (!known && !decimal_record)
        throw std::runtime_error("entry '" + name + "' is not part of a torch.save file");
    }
    verify_byteorder(zip);
    const auto data = zip.texts.find(p + "data.pkl");
    if (data == zip.texts.end())
      throw std::runtime_error("entry '" + p + "data.pkl' is missing");
    const PRef root = PickleChecker(zip, data->first, data->second, PickleChecker::Kind::kPlain).run();
    if (root->kind != PValue::kDict)
      throw std::runtime_error("pickle '" + data->first + "' does not hold a dict");
  } catch (const std::runtime_error& e) {
    throw corrupt_contents(path, e.what(), noun);
  }
}

// ---------------------------------------------------------------------------------------
// Checks of the loaded tensors.

// Every tensor inside `v`, with its name: object attributes joined with '.', under `name`.
void collect_tensors(const c10::IValue& v, const std::string& name,
                     std::vector<std::pair<std::string, at::Tensor>>& out, int depth) {
  if (depth > kMaxDepth) return;
  auto child = [&](const std::string& n) { return name.empty() ? n : name + "." + n; };
  if (v.isTensor()) {
    out.emplace_back(name, v.toTensor());
  } else if (v.isObject()) {
    const auto obj = v.toObject();
    const auto type = obj->type();
    for (size_t i = 0; i < obj->slots().size() && i < type->numAttributes(); ++i)
      collect_tensors(obj->getSlot(i), child(type->getAttributeName(i)), out, depth + 1);
  } else if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    for (size_t i = 0; i < elems.size(); ++i)
      collect_tensors(elems[i], child(std::to_string(i)), out, depth + 1);
  } else if (v.isList()) {
    const auto list = v.toListRef();
    for (size_t i = 0; i < list.size(); ++i)
      collect_tensors(list[i], child(std::to_string(i)), out, depth + 1);
  }
}

// A tensor as read: dense, on the CPU, and inside its storage.
void check_loaded_tensor(const std::string& path, const std::string& name, const at::Tensor& t,
                         const std::string& noun) {
  if (!t.defined()) return;
  if (t.layout() != at::kStrided || !t.device().is_cpu() || t.is_quantized())
    throw corrupt_contents(path, "tensor '" + name + "' is not a dense CPU tensor", noun);
  const auto sizes = t.sizes().vec();
  const auto strides = t.strides().vec();
  const int64_t need = bytes_reached(sizes, strides, t.storage_offset(),
                                     static_cast<int64_t>(t.element_size()));
  const int64_t have = static_cast<int64_t>(t.storage().nbytes());
  if (need < 0)
    throw corrupt_contents(path, "tensor '" + name + "' has impossible sizes " +
                                     c10::str(t.sizes()) + ", strides " +
                                     c10::str(t.strides()) + " or storage offset " +
                                     std::to_string(t.storage_offset()), noun);
  if (need > have || (need > 0 && !t.storage().data()))
    throw corrupt_contents(path, "tensor '" + name + "' needs " + std::to_string(need) +
                                     " bytes but its storage holds " + std::to_string(have), noun);
}

// True unless a floating tensor holds NaN or infinity.
bool finite_values(const at::Tensor& t) {
  return !at::isFloatingType(t.scalar_type()) || t.numel() == 0 ||
         at::isfinite(t).all().item<bool>();
}

}  // namespace seqmix::train::detail
