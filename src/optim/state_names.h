// Parsing the optimizers' state_dict names, "state.{i}.{field}" (not installed).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace attn::optim::names {

struct StateKey {
  std::size_t index = 0;
  std::string field;
};

// Splits "state.{i}.{field}"; throws attn::Error "[fn] unexpected key '...'" when the name has
// another form or field is not one of `fields`, and "[fn] key '...' refers to parameter i but the
// optimizer has n" when i >= n_params.
StateKey parse_state_key(const char* fn, const std::string& name,
                         std::initializer_list<const char*> fields, std::size_t n_params);

}  // namespace attn::optim::names
