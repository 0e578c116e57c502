"""Parameter counts of the real-shape presets against the published figures (abstract shapes via
jax.eval_shape; nothing is allocated)."""

from __future__ import annotations

import pytest

from configs.presets import get_preset
from models.specs import count_params


@pytest.mark.parametrize(
    "preset, total, total_tol, active, active_tol",
    [
        ("deepseek-v3", 671e9, 0.02, 37e9, 0.05),  # DeepSeek-V3 report (arXiv:2412.19437)
        # DeepSeek-V4-Flash's model card: 284B total, 13B activated (rounded), here without
        # the 1.06B embedding and head.
        ("deepseek-v4-flash", 284e9, 0.01, 13e9 + 1.06e9, 0.03),
        ("qwen3-30b-a3b", 30.5e9, 0.02, 3.3e9, 0.05),  # Qwen3 model card
        ("llama-3.1-70b", 70.55e9, 0.01, 70.55e9, 0.01),  # dense: all active
        # Model cards; the active counts leave out the 0.58B embedding (OpenAI's: 3.6B, 5.1B).
        ("gpt-oss-20b", 20.91e9, 0.01, 3.61e9 + 0.58e9, 0.02),
        ("gpt-oss-120b", 116.83e9, 0.01, 5.13e9 + 0.58e9, 0.02),
        # GLM-4.5 report: 355B with its MTP layer (not loaded); 32B active without the 1.55B
        # embedding and head.
        ("glm-4.5", 355e9, 0.02, 32e9 + 1.55e9, 0.01),
        ("glm-4.7-flash", 30e9, 0.02, None, 0),  # "30B-A3B": the active count is rounded
        # MiniMax-M2 model card: 230B total, 10B active (rounded) without the 1.23B embedding
        # and head.
        ("minimax-m2", 230e9, 0.01, 10e9 + 1.23e9, 0.02),
        ("dots-llm1", 142e9, 0.01, 14e9, 0.01),  # dots.llm1 model card: 142B, 14B active
        ("qwen1.5-moe-a2.7b", 14.3e9, 0.01, 2.7e9, 0.01),  # Qwen1.5-MoE model card
        ("olmoe-1b-7b", 6.9e9, 0.01, 1.3e9, 0.02),  # OLMoE paper (arXiv:2409.02060)
        # The checkpoints' names: Mistral-Small-4-119B, Mistral-Large-4-1T-A52B (its total
        # rounded to 1T: 1.05T here).
        ("mistral-small-4", 119e9, 0.01, None, 0),
        ("mistral-large-4", 1e12, 0.06, 52e9, 0.03),
        # Meta's model cards: 109B and 400B total (with the vision encoder, not counted
        # here), 17B active.
        ("llama-4-scout", 109e9, 0.02, 17e9, 0.02),
        ("llama-4-maverick", 400e9, 0.01, 17e9, 0.02),
        # Qwen's model cards: "80B in total and 3B activated" (rounded), 397B-A17B (with
        # the vision encoder's ~0.4B, not counted here).
        ("qwen3-next-80b-a3b", 80e9, 0.01, None, 0),
        ("qwen3.5-397b-a17b", 397e9, 0.01, 17e9, 0.03),
        # Moonshot's "48B total, 3B activated" (both rounded: the checkpoint holds 49.1B).
        ("kimi-linear-48b-a3b", 48e9, 0.03, None, 0),
        # NVIDIA's Nemotron 3 Nano card: 31.6B total, 3.6B active with the embeddings.
        ("nemotron-3-nano-30b-a3b", 31.6e9, 0.01, 3.6e9, 0.02),
        # Upstage's Solar-Open-100B card: 102.6B total, 12B active.
        ("solar-open-100b", 102.6e9, 0.01, 12e9, 0.02),
        # Google's Gemma 4 cards: 25.2B total, 3.8B active; 30.7B (transformers 5.25's
        # Gemma4ForCausalLM built with these shapes on the meta device holds 25,233,141,790 /
        # 3,822,530,590 active and 30,697,345,340: the counts here, to the parameter).
        ("gemma-4-26b-a4b", 25.2e9, 0.005, 3.8e9, 0.01),
        ("gemma-4-31b", 30.7e9, 0.005, 30.7e9, 0.005),
        # Xiaomi's MiMo-V2-Flash card: 309B total, 15B active (rounded). transformers 5.25's
        # MiMoV2FlashForCausalLM with its default shapes on the meta device: 308,778,768,832
        # parameters, plus the 47 x 256 correction biases it keeps as buffers: the count here.
        ("mimo-v2-flash", 309e9, 0.005, 15e9, 0.03),
        # Meituan's LongCat-Flash card: 560B total (its active count varies with the zero-
        # computation experts chosen: not checked). transformers 5.25's LongcatFlashForCausalLM
        # with its default shapes on the meta device: 560,664,958,976 parameters, plus the 28
        # x 768 correction biases it keeps as buffers: the count here, to the parameter.
        ("longcat-flash", 560.665e9, 0.0001, None, 0),
        # AI21's Jamba 1.5 Mini card: 52B total, 12B active; transformers 5.25's
        # JambaForCausalLM with its default shapes on the meta device: 51,570,323,328 and
        # 12,110,311,296 (top-2 of 16 experts), the counts here to the parameter.
        ("jamba-1.5-mini", 51.570323328e9, 1e-9, 12.110311296e9, 1e-9),
        # MiniMax-Text-01's card: 456B total, 45.9B active (without the embedding and the
        # head: 48.40B with them); transformers 5.25's MiniMaxForCausalLM with these shapes
        # on the meta device: 456,089,655,296 and (top-2 of 32 experts) 48,403,306,496, the
        # counts here to the parameter.
        ("minimax-text-01", 456.089655296e9, 1e-9, 48.403306496e9, 1e-9),
        # Sarvam-30B, Param2-17B-A2.4B, Sarvam-105B (transformers 5.25's class defaults):
        # their ForCausalLM on the meta device holds 32,152,648,064 / 17,151,124,096 /
        # 106,031,763,456 parameters (active: 4,520,573,312 / 2,554,946,176 / 12,414,898,176),
        # plus the correction biases kept as buffers (18 / 20 / 31 x 128 or 64): the counts
        # here, to the parameter.
        ("sarvam-30b", 32.152650368e9, 1e-9, 4.520575616e9, 1e-9),
        ("param2-17b-a2.4b", 17.151125376e9, 1e-9, 2.554947456e9, 1e-9),
        ("sarvam-105b", 106.031767424e9, 1e-9, 12.414902144e9, 1e-9),
        # Hunyuan 3 and MiniCPM5-15B-A2.5B (transformers 5.25's class defaults): their
        # ForCausalLM on the meta device holds 295,033,528,320 / 15,002,552,320 parameters
        # (active: 20,675,715,072 / 2,771,961,856) plus 79 x 192 / 27 x 160 correction biases
        # kept as buffers: the counts here, to the parameter.
        ("hy-v3", 295.033543488e9, 1e-9, 20.675730240e9, 1e-9),
        ("minicpm5-15b-a2.5b", 15.002556640e9, 1e-9, 2.771966176e9, 1e-9),
        # Databricks' DBRX card: 132B total, 36B active; transformers 5.25's DbrxForCausalLM
        # with dbrx-instruct's shapes on the meta device: 131,596,523,520 and (top-4 of 16)
        # 36,469,708,800, the counts here to the parameter.
        ("dbrx", 131.596523520e9, 1e-9, 36.469708800e9, 1e-9),
        # ERNIE-4.5-0.3B (dense): transformers 5.25's Ernie4_5ForCausalLM with its default
        # shapes (the card's) on the meta device: 360,748,032 parameters, tied embeddings.
        ("ernie-4.5-0.3b", 0.360748032e9, 1e-9, 0.360748032e9, 1e-9),
        # GLM-4-9B's shapes: transformers 5.25's Glm4ForCausalLM with its default shapes on
        # the meta device: 9,400,279,040 parameters.
        ("glm-4-9b", 9.400279040e9, 1e-9, 9.400279040e9, 1e-9),
        # GLM-4-9B-chat-hf: GlmForCausalLM with GlmConfig's defaults: 9,399,951,360.
        ("glm-4-9b-chat", 9.399951360e9, 1e-9, 9.399951360e9, 1e-9),
        # Gemma 2 2B / 9B / 27B: transformers 5.25's Gemma2ForCausalLM with each release's
        # shapes on the meta device (2B's are Gemma2Config's defaults): 2,614,341,888,
        # 9,241,705,984 and 27,227,128,320, the sizes the releases' pages give.
        # Gemma 2B / 7B: the same counts (GemmaForCausalLM): 2,506,172,416 and 8,537,680,896.
        ("gemma-2b", 2.506172416e9, 1e-9, 2.506172416e9, 1e-9),
        ("gemma-7b", 8.537680896e9, 1e-9, 8.537680896e9, 1e-9),
        # Phi-1.5 / Phi-2: PhiForCausalLM's counts, 1,418,270,720 and 2,779,683,840.
        # MiniCPM3-4B: MiniCPM3ForCausalLM with MiniCPM3Config's defaults: 4,073,875,968.
        ("minicpm3-4b", 4.073875968e9, 1e-9, 4.073875968e9, 1e-9),
        ("phi-1_5", 1.418270720e9, 1e-9, 1.418270720e9, 1e-9),
        ("phi-2", 2.779683840e9, 1e-9, 2.779683840e9, 1e-9),
        ("gemma-2-2b", 2.614341888e9, 1e-9, 2.614341888e9, 1e-9),
        ("gemma-2-9b", 9.241705984e9, 1e-9, 9.241705984e9, 1e-9),
        ("gemma-2-27b", 27.227128320e9, 1e-9, 27.227128320e9, 1e-9),
        # Pythia 1B / 6.9B / 12B: the Pythia paper's totals (arXiv:2304.01373, Table 1),
        # which transformers 5.25's GPTNeoXForCausalLM with their shapes counts on the meta
        # device too: 1,011,781,632, 6,857,302,016 and 11,846,072,320.
        ("pythia-1b", 1.011781632e9, 1e-9, 1.011781632e9, 1e-9),
        ("pythia-6.9b", 6.857302016e9, 1e-9, 6.857302016e9, 1e-9),
        ("pythia-12b", 11.846072320e9, 1e-9, 11.846072320e9, 1e-9),
        # GPT-J-6B, Falcon-7B / 40B / 180B: transformers 5.25's GPTJForCausalLM and
        # FalconForCausalLM with their shapes on the meta device: 6,050,882,784,
        # 6,921,720,704, 41,835,970,560 and 179,522,565,120.
        ("gpt-j-6b", 6.050882784e9, 1e-9, 6.050882784e9, 1e-9),
        ("falcon-7b", 6.921720704e9, 1e-9, 6.921720704e9, 1e-9),
        ("falcon-40b", 41.835970560e9, 1e-9, 41.835970560e9, 1e-9),
        ("falcon-180b", 179.522565120e9, 1e-9, 179.522565120e9, 1e-9),
        # StarCoder (the "15.5B" of BigCode's card): GPTBigCodeForCausalLM with its shapes on
        # the meta device, 15,517,456,384.
        ("starcoder", 15.517456384e9, 1e-9, 15.517456384e9, 1e-9),
        # OPT-125M and OPT-6.7B: OPTForCausalLM with their shapes on the meta device,
        # 125,239,296 and 6,658,473,984 (the tables' two extra position rows included).
        ("opt-125m", 0.125239296e9, 1e-9, 0.125239296e9, 1e-9),
        ("opt-6.7b", 6.658473984e9, 1e-9, 6.658473984e9, 1e-9),
        # GPT-Neo 125M / 1.3B / 2.7B: GPTNeoForCausalLM with their shapes on the meta device,
        # 125,198,592, 1,315,575,808 and 2,651,307,520 (tied embeddings counted once).
        ("gpt-neo-125m", 0.125198592e9, 1e-9, 0.125198592e9, 1e-9),
        ("gpt-neo-1.3b", 1.315575808e9, 1e-9, 1.315575808e9, 1e-9),
        ("gpt-neo-2.7b", 2.651307520e9, 1e-9, 2.651307520e9, 1e-9),
        # CodeGen 350M / 2B / 6B / 16B: CodeGenForCausalLM with their shapes on the meta
        # device, 356,712,448, 2,779,356,160, 7,064,213,504 and 16,032,155,648.
        ("codegen-350m", 0.356712448e9, 1e-9, 0.356712448e9, 1e-9),
        ("codegen-2b", 2.779356160e9, 1e-9, 2.779356160e9, 1e-9),
        ("codegen-6b", 7.064213504e9, 1e-9, 7.064213504e9, 1e-9),
        ("codegen-16b", 16.032155648e9, 1e-9, 16.032155648e9, 1e-9),
        # Persimmon-8B: PersimmonForCausalLM with its shapes on the meta device, 9,397,175,296.
        ("persimmon-8b", 9.397175296e9, 1e-9, 9.397175296e9, 1e-9),
        # BioGPT and BioGPT-Large: BioGptForCausalLM with their shapes on the meta device,
        # 346,763,264 and 1,571,188,800 (the position tables' two extra rows included).
        ("biogpt", 0.346763264e9, 1e-9, 0.346763264e9, 1e-9),
        ("biogpt-large", 1.571188800e9, 1e-9, 1.571188800e9, 1e-9),
        # XGLM-564M and XGLM-7.5B: XGLMForCausalLM with their shapes on the meta device,
        # 564,463,616 and 7,492,771,840 (its sinusoidal table is a buffer, not a parameter).
        ("xglm-564m", 0.564463616e9, 1e-9, 0.564463616e9, 1e-9),
        ("xglm-7.5b", 7.492771840e9, 1e-9, 7.492771840e9, 1e-9),
    ],
)
def test_param_counts(preset, total, total_tol, active, active_tol):
    got_total, got_active = count_params(get_preset(preset))
    assert got_total == pytest.approx(total, rel=total_tol)
    if active is not None:
        assert got_active == pytest.approx(active, rel=active_tol)
