#pragma once
// Internal to src/train/: the checks checkpoint.cpp runs on LibTorch archives before LibTorch
// reads them, for the other readers of such files (export.cpp). LibTorch's own readers check
// neither the zip nor the pickle and can crash on corrupt or crafted bytes.
#include <ATen/core/Tensor.h>

#include <string>

namespace seqmix::train::detail {

// Verifies `path` as a zip archive holding one plain pickle, as Python's torch.save and
// torch::pickle_save write it, before torch::pickle_load reads it: the zip structure and every
// entry's CRC-32, the archive format version, no entries but data.pkl, data/<n> and the
// version records, and data.pkl run on an abstract unpickler that accepts only dicts (with
// string keys), lists and tuples of strings, numbers, bools, None and tensors (every tensor
// inside its storage, every storage record exactly the size its element count needs), and
// whose top value is a dict. `noun` names the file in messages ("export"), `not_a` what it
// should have been ("a seqmix export or state dict").
// @throws std::runtime_error "<noun> '<path>' does not exist", "<noun> '<path>' is corrupt or
//         not <not_a> (zip: ...)", "<noun> '<path>' is corrupt: ...".
void verify_plain_pickle(const std::string& path, const std::string& noun,
                         const std::string& not_a);

// A tensor as torch::pickle_load made it: dense, on the CPU, inside its storage.
// @throws std::runtime_error "<noun> '<path>' is corrupt: tensor '<name>' ...".
void check_loaded_tensor(const std::string& path, const std::string& name, const at::Tensor& t,
                         const std::string& noun);

// True unless a floating tensor holds NaN or infinity (the check checkpoints apply).
bool finite_values(const at::Tensor& t);

}  // namespace seqmix::train::detail
