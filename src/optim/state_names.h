// The optimizers' shared checks (not installed): parsing the state_dict names "state.{i}.{field}",
// the saved tensors, and the gradients a step reads.
#pragma once

#include <attn/tensor.h>

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

// A saved step count: one int64, at least min_step; attn::Error naming `name` otherwise.
int64_t state_step(const char* fn, const std::string& name, const attn::Tensor& t,
                   int64_t min_step);

// Throws attn::Error unless the saved tensor `name` has parameter i's dtype and shape.
void check_state_like(const char* fn, const std::string& name, const attn::Tensor& t,
                      const attn::Tensor& param, std::size_t i);

// Throws attn::Error unless the gradient g has the parameter's shape and dtype.
void check_grad(const char* fn, const attn::Tensor& g, const attn::Tensor& param);

}  // namespace attn::optim::names
