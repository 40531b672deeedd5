// Files in and out: atomic writes and the safetensors format.
//
// safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value", ...}}, then the raw little-endian tensor bytes. Files written
// here load in PyTorch with safetensors.torch.load_file. Supported dtypes: F32, I64, BOOL.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::io {

// Writes `bytes` to `path` so that a crash at any moment leaves either the old file or the
// complete new one: a temporary file in the same directory, fsync, rename over `path`, fsync of
// the directory. Throws attn::Error naming the path and the system error.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The whole file. Throws attn::Error ("[read_file] cannot open 'x': No such file or directory").
std::string read_file(const std::string& path);

struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order (sorted by offset)
  std::map<std::string, std::string> metadata;
  std::string what = "<memory>";  // where it came from (the path), for error messages
  // The tensor called `name`; attn::Error naming `what` (the file) when missing.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Serialises tensors (any strides; written contiguous) and metadata. Names must be unique and
// non-empty and not "__metadata__".
std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {});
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});  // atomic
// Parses and validates everything (header length, JSON, dtypes, shapes, offsets inside the
// buffer, contiguous and non-overlapping data, sizes matching shapes); throws attn::Error
// ("[load_safetensors] 'what': ...") on any defect. Never reads out of bounds.
SafeTensors from_safetensors(std::string_view bytes, const std::string& what = "<memory>");
SafeTensors load_safetensors(const std::string& path);

}  // namespace attn::io
