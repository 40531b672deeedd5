// The whole public C++ API of attn.
#pragma once

#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/common.h>
#include <attn/device.h>
#include <attn/flex.h>
#include <attn/kv_cache.h>
#include <attn/mxfp4.h>
#include <attn/nn.h>
#include <attn/ops.h>
#include <attn/print.h>
#include <attn/random.h>
#include <attn/tensor.h>
