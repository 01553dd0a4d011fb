#!/usr/bin/env bash
# The maintained DeepSeek V4 DAPO launcher for Megatron Lite lives in
# verl-project/Megatron-LM's lite branch:
#
# https://github.com/verl-project/Megatron-LM/blob/lite/experimental/lite/examples/verl/scripts/run_deepseek_v4_dapo.sh

set -euo pipefail

echo "This example has moved to the canonical Megatron Lite launcher:" >&2
echo "https://github.com/verl-project/Megatron-LM/blob/lite/experimental/lite/examples/verl/scripts/run_deepseek_v4_dapo.sh" >&2
exit 1
