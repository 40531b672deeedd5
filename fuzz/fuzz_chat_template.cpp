// Chat templates (attn::data::ChatTemplate) on arbitrary sources: parsing succeeds or throws
// attn::Error; a template that parses is rendered over a fixed conversation (messages with a
// system turn, a tool call and Unicode, tools, add_generation_prompt) and succeeds or throws
// attn::Error (raise_exception, a type error, a limit), with valid UTF-8 output whenever the
// source and context are.
#include <attn/chat_template.h>
#include <attn/tensor.h>

#include <string>

#include "fuzz_util.h"

namespace {

constexpr const char* kContext = R"({
  "messages": [
    {"role": "system", "content": "  be brief  "},
    {"role": "user", "content": "Hi \u00e9\u8a9e"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1.5, "y": [1, null]}}}]},
    {"role": "tool", "content": "{\"ok\": true}"},
    {"role": "user", "content": "<tool_response>x</tool_response>"}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view src = attn_fuzz::as_view(data, size);
  std::string out;
  try {
    const attn::data::ChatTemplate t(src, "fuzz");
    out = t.render_json(kContext);
  } catch (const attn::Error&) {
    return 0;
  }
  // Output pieces come from the source's text and the context's strings, cut at character
  // boundaries (slices and indexing count code points), so valid input gives valid output.
  if (attn_fuzz::utf8_code_points(src)) FUZZ_CHECK(attn_fuzz::utf8_code_points(out).has_value());
  return 0;
}
