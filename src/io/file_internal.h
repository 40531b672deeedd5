// Helpers shared by src/io and src/data (not installed).
#pragma once

#include <string>

namespace attn::io::detail {

// The whole file at `path`; errors are reported as "[fn] cannot open 'path': <strerror>",
// "[fn] 'path' is a directory" or "[fn] cannot read 'path': <strerror>".
std::string read_whole_file(const char* fn, const std::string& path);

}  // namespace attn::io::detail
