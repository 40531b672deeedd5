// Helpers shared by src/io and src/data (not installed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attn::io::detail {

// The whole file at `path`; errors are reported as "[fn] cannot open 'path': <strerror>",
// "[fn] 'path' is a directory" or "[fn] cannot read 'path': <strerror>".
std::string read_whole_file(const char* fn, const std::string& path);

// io::write_file_atomic with errors reported as "[fn] cannot write 'path': ..." (plot::save
// shares it).
void write_file_atomic(const char* fn, const std::string& path, std::string_view bytes);

// A debugging hook for fault tests (`attn train --debug-slow-save MS`): every atomic write stops
// for `ms` milliseconds halfway through writing its temporary file, so that a process killed
// then leaves a half-written temporary file behind. 0 (the default) turns it off.
void set_write_pause(int64_t ms);

}  // namespace attn::io::detail
