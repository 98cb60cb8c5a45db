# Pre-training presets: each function prints the positional arguments of scripts/run_pretraining.sh.
#
#   bash scripts/run_pretraining.sh $(source scripts/configs/pretrain_config.sh && dgxa100-80g_8gpu_amp)
#
# GPU presets: NVIDIA's BERT-large recipe (LAMB, global batch 65536 at length 128 for 7038 steps, then 32768 at
# length 512 for 1563 steps). The dgxa100 8-GPU values are NVIDIA's (DeepLearningExamples, PaddlePaddle BERT,
# scripts/configs/pretrain_config.sh). The other GPU presets are derived, not published: the 1-GPU ones keep
# the per-GPU micro-batch and multiply the accumulation by 8, so the global batch and hence the learning-rate
# recipe stay the same; H100 80GB has the A100 80GB's memory and takes its micro-batches; the H200 presets
# (141 GB) double the micro-batch and halve the accumulation and are untested: if they run out of memory, use
# the dgxh100 ones, which give the same global batch. The LANS presets (Zheng et al. 2020, arXiv:2006.13484)
# swap the optimizer into this recipe with a plain warmup-then-decay schedule (arguments 34 and 35 hold the
# learning rate constant after warmup for a fraction of the steps); they are not the paper's 96K/33K recipe.
#
# CPU presets run here in minutes: cpu_tiny trains bert_configs/bert-tiny-uncased.json for a handful of
# steps per phase on a corpus built offline from Python's documentation (wikipedia_source "sample"), to show
# the plumbing; cpu_demo (the README's main command, about 3 minutes on 2 cores) pretrains a tiny BERT on that
# corpus long enough for the held-out masked-LM loss to fall and its accuracy to rise; cpu_tiny_beyond is
# cpu_tiny with the four features NVIDIA's recipe lacks turned on together.
#
# Paths come from BERT_PREP_WORKING_DIR (data; default <repo>/data), RESULTS_DIR (checkpoints, reports and logs;
# default <repo>/results) and the location of this file (code). The GPU presets write to RESULTS_DIR itself, in
# NVIDIA's layout (<results>/bert-large-uncased/phase2/1563, where the SQuAD and GLUE presets look); each CPU
# preset to its own <RESULTS_DIR>/<preset>, so that running one after another never resumes the other's
# checkpoints (set by _print_cpu_preset_args).
# shellcheck shell=bash

_PRETRAIN_CONFIG_CODEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Print the arguments in run_pretraining.sh's order from the variables a preset sets.
_print_pretrain_args() {
  echo "$train_batch_size" "$learning_rate" "$precision" "$num_gpus" \
    "$warmup_proportion" "$train_steps" "$save_checkpoint_steps" \
    "$create_logfile" "$gradient_accumulation_steps" "$seed" "$job_name" \
    "$train_batch_size_phase2" "$learning_rate_phase2" \
    "$warmup_proportion_phase2" "$train_steps_phase2" "$gradient_accumulation_steps_phase2" \
    "$DATA_DIR_PHASE1" "$DATA_DIR_PHASE2" "$CODEDIR" "$init_checkpoint" \
    "$wikipedia_source" "$num_dask_workers" "$num_shards_per_worker" "$num_workers" \
    "$sample_ratio" "$phase2_bin_size" "$masking" \
    "$BERT_CONFIG" "$enable_benchmark" "$benchmark_steps" "$benchmark_warmup_steps" "$fuse_mha" \
    "$optimizer" "$constant_proportion" "$constant_proportion_phase2" \
    "$holdout_fraction" "$eval_freq" "$num_eval_batches" \
    "$whole_word_masking" "$masked_lm_ratio" "$no_nsp" "$pack_sequences" "$results_dir" \
    "$time_budget" "$eval_interval_minutes" "$pre_layer_norm" "$linear_bias" "$gated_feed_forward" "$dropout" \
    "$trained_vocab_size" "$gradient_merge_ramp" "$alibi" "$phase2_budget_share"
}

# NVIDIA's dgxa100-80g_8gpu_amp: BERT-large, 8 GPUs, float16 AMP.
_bert_large_recipe() {
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}"
  train_batch_size=256
  learning_rate=6e-3
  precision=amp
  num_gpus=8
  warmup_proportion=0.2843
  train_steps=7038
  save_checkpoint_steps=200
  create_logfile=false
  gradient_accumulation_steps=32
  seed=42
  job_name=bert_lamb_pretraining
  train_batch_size_phase2=32
  learning_rate_phase2=4e-3
  warmup_proportion_phase2=0.128
  train_steps_phase2=1563
  gradient_accumulation_steps_phase2=128
  DATA_DIR_PHASE1="$prep/pretrain/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain/phase2/bin_size_64/parquet"
  CODEDIR="$_PRETRAIN_CONFIG_CODEDIR"
  init_checkpoint=None
  wikipedia_source="$prep/wikipedia/source"
  num_dask_workers=128
  num_shards_per_worker=128
  num_workers=4
  sample_ratio=0.9
  phase2_bin_size=64
  masking=static
  BERT_CONFIG="$CODEDIR/bert_configs/bert-large-uncased.json"
  enable_benchmark=false
  benchmark_steps=10
  benchmark_warmup_steps=10
  fuse_mha=true
  optimizer=Lamb
  constant_proportion=0
  constant_proportion_phase2=0
  holdout_fraction=0
  eval_freq=1000
  num_eval_batches=100
  whole_word_masking=false
  masked_lm_ratio=0.15
  no_nsp=false
  pack_sequences=false
  results_dir="${RESULTS_DIR:-$_PRETRAIN_CONFIG_CODEDIR/results}"
  time_budget=none
  eval_interval_minutes=none
  pre_layer_norm=false
  linear_bias=true
  gated_feed_forward=false
  dropout=true
  trained_vocab_size=none
  gradient_merge_ramp=0
  alibi=false
  phase2_budget_share=0
}

# For a preset that trains phase 1 to a time budget (argument 44): the budget in minutes is $TIME_BUDGET_MINUTES
# when set, else the preset's default; phase 1 only (train_steps_phase2 0), train_steps then caps the steps.
_time_budget() {  # default_minutes
  time_budget="${TIME_BUDGET_MINUTES:-$1}"
  train_steps_phase2=0
}

# Micro-batches (phase 1, phase 2) and accumulation (phase 1, phase 2) for a GPU count.
_batches() {  # num_gpus batch1 accumulation1 batch2 accumulation2
  num_gpus=$1
  train_batch_size=$2
  gradient_accumulation_steps=$3
  train_batch_size_phase2=$4
  gradient_accumulation_steps_phase2=$5
}

dgxa100-80g_8gpu_amp() (
  _bert_large_recipe
  _print_pretrain_args
)

dgxa100-80g_8gpu_tf32() (
  _bert_large_recipe
  precision=tf32
  _batches 8 128 64 16 256
  _print_pretrain_args
)

dgxa100-80g_1gpu_amp() (
  _bert_large_recipe
  _batches 1 256 256 32 1024
  _print_pretrain_args
)

dgxa100-80g_1gpu_tf32() (
  _bert_large_recipe
  precision=tf32
  _batches 1 128 512 16 2048
  _print_pretrain_args
)

dgxh100-80g_8gpu_amp() (
  _bert_large_recipe
  _print_pretrain_args
)

dgxh100-80g_8gpu_bf16() (
  _bert_large_recipe
  precision=bf16
  _print_pretrain_args
)

dgxh100-80g_8gpu_tf32() (
  _bert_large_recipe
  precision=tf32
  _batches 8 128 64 16 256
  _print_pretrain_args
)

dgxh100-80g_1gpu_amp() (
  _bert_large_recipe
  _batches 1 256 256 32 1024
  _print_pretrain_args
)

dgxh200-141g_8gpu_amp() (
  _bert_large_recipe
  _batches 8 512 16 64 64
  _print_pretrain_args
)

dgxh200-141g_8gpu_bf16() (
  _bert_large_recipe
  precision=bf16
  _batches 8 512 16 64 64
  _print_pretrain_args
)

dgxh200-141g_1gpu_amp() (
  _bert_large_recipe
  _batches 1 512 128 64 512
  _print_pretrain_args
)

dgxa100-80g_8gpu_amp_lans() (
  _bert_large_recipe
  optimizer=Lans
  _print_pretrain_args
)

dgxh100-80g_8gpu_bf16_lans() (
  _bert_large_recipe
  precision=bf16
  optimizer=Lans
  _print_pretrain_args
)

# bert-tiny (2 layers, hidden 128) on the offline sample corpus: 6 + 4 steps on one CPU process.
_cpu_tiny_recipe() {
  _bert_large_recipe
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}/sample"
  precision=fp32
  learning_rate=6e-3
  warmup_proportion=0.34
  train_steps=6
  save_checkpoint_steps=3
  learning_rate_phase2=4e-3
  warmup_proportion_phase2=0.25
  train_steps_phase2=4
  _batches 1 8 2 4 2
  DATA_DIR_PHASE1="$prep/pretrain/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain/phase2/bin_size_64/parquet"
  wikipedia_source=sample
  num_dask_workers=1
  num_shards_per_worker=1
  num_workers=1
  sample_ratio=1
  BERT_CONFIG="$CODEDIR/bert_configs/bert-tiny-uncased.json"
  benchmark_steps=2
  benchmark_warmup_steps=2
}

# A CPU preset's arguments, with results_dir its own folder named after the preset (default: the function calling
# this one).
_print_cpu_preset_args() {  # [preset]
  results_dir="${RESULTS_DIR:-$_PRETRAIN_CONFIG_CODEDIR/results}/${1:-${FUNCNAME[1]}}"
  _print_pretrain_args
}

cpu_tiny() (
  _cpu_tiny_recipe
  _print_cpu_preset_args
)

cpu_tiny_lans() (
  _cpu_tiny_recipe
  optimizer=Lans
  constant_proportion=0.34
  constant_proportion_phase2=0.25
  _print_cpu_preset_args
)

# The README's demo: phase 1 only (train_steps_phase2 0), 400 LAMB steps of 32 sequences at length 128 on the
# sample corpus, 10% of its documents held out and evaluated every 25 steps. bert-tiny with a 4096-row
# embedding, the size of the vocab trained on the corpus: a 30522-row one (bert-tiny-uncased.json) makes the
# masked-LM head 7 times as costly for rows no token uses. Its own data folder, as the held-out split and the
# shards go together.
cpu_demo() (
  _cpu_tiny_recipe
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}/sample/demo"
  learning_rate=2e-2
  warmup_proportion=0.1
  train_steps=400
  save_checkpoint_steps=100
  train_steps_phase2=0
  _batches 1 32 1 4 2
  DATA_DIR_PHASE1="$prep/pretrain/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain/phase2/bin_size_64/parquet"
  num_dask_workers=2
  BERT_CONFIG="$CODEDIR/bert_configs/bert-tiny-4k-vocab.json"
  holdout_fraction=0.1
  eval_freq=25
  _print_cpu_preset_args
)

# cpu_tiny with the four features beyond NVIDIA's recipe (README, "Beyond NVIDIA's recipe") turned on together,
# to check that they work through the recipe: whole-word masking drawn by the loader (dynamic masking), masked LM
# alone (single-segment shards, no NSP head), packed micro-batches, and 10% of the documents held out and
# evaluated every 3 steps and at the end of each phase. Its own data folder: its shards have no masks and no
# sentence pairs, and a held-out split.
cpu_tiny_beyond() (
  _cpu_tiny_recipe
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}/sample/beyond"
  DATA_DIR_PHASE1="$prep/pretrain/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain/phase2/bin_size_64/parquet"
  masking=dynamic
  holdout_fraction=0.1
  eval_freq=3
  num_eval_batches=2
  whole_word_masking=true
  no_nsp=true
  pack_sequences=true
  _print_cpu_preset_args
)

# Pretraining to a wall-clock budget on real Wikipedia (docs/time-to-quality-summary.md): phase 1 only,
# trained for $TIME_BUDGET_MINUTES (default 60) of training time, the learning-rate schedule spanning that time
# (run_pretraining.py --time-budget). The corpus is ../shared/data/wikipedia/en-2015 (WikiExtractor's xz files as
# they are; $PADDLEBERT_SHARED_DIR names another shared folder), masked by the loader (a new draw each epoch), 1%
# of its articles held out and validated every 2 minutes of training. One preset per model size that
# time_to_quality.py --compare-sizes compares; cpu_budget_tiny first, the yardstick's (docs/time-to-quality.md,
# DEFAULT_PRESET in benchmarks/time_to_quality.py says why). LAMB's peak
# learning rate is the best of docs/time-to-quality-search.md's 5-minute trials on bert-tiny at batch 64 (2e-3
# stayed near the unigram plateau, 3e-2 collapsed to one answer). The same search found batch 16 better at 5 minutes
# (14.4% validation MLM accuracy against 12.2%), but at 20 minutes (cpu_budget_tiny_batch16,
# docs/time-to-quality-recipes.md) it lost downstream, so the presets keep 64. Warmup was not searched.
_cpu_budget_recipe() {  # bert_config
  _bert_large_recipe
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}/wikipedia-en-2015"
  local shared="${PADDLEBERT_SHARED_DIR:-$_PRETRAIN_CONFIG_CODEDIR/../shared}"
  precision=fp32
  learning_rate=1e-2
  warmup_proportion=0.1
  train_steps=10000000  # a cap the budget ends long before
  save_checkpoint_steps=500
  _batches 1 64 1 4 2
  DATA_DIR_PHASE1="$prep/pretrain/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain/phase2/bin_size_64/parquet"
  wikipedia_source="$shared/data/wikipedia/en-2015"
  num_dask_workers=2
  num_shards_per_worker=16
  num_workers=1
  sample_ratio=1
  masking=dynamic
  holdout_fraction=0.01
  eval_interval_minutes=2
  num_eval_batches=20
  BERT_CONFIG="$CODEDIR/bert_configs/$1"
  _time_budget 60
}

# A budget-recipe trial: cpu_budget_tiny with the settings given, each name=value or a call such as
# "_batches 1 16 1 4 2" (the preset's comment says why).
_cpu_budget_trial() {  # setting...
  _cpu_budget_recipe bert-tiny-uncased.json
  local setting
  for setting in "$@"; do
    if [[ $setting == *=* ]]; then
      printf -v "${setting%%=*}" '%s' "${setting#*=}"
    else
      $setting  # word splitting wanted: the function and its arguments
    fi
  done
  _print_cpu_preset_args "${FUNCNAME[1]}"
}

cpu_budget_tiny() (
  _cpu_budget_recipe bert-tiny-uncased.json
  _print_cpu_preset_args
)

# A budget-recipe trial (time_to_quality.py --recipe-trials; docs/time-to-quality-recipes.md): cpu_budget_tiny with
# Cramming's pre-LayerNorm blocks and no dropout in pretraining (arguments 46 and 49).
cpu_budget_tiny_prenorm() ( _cpu_budget_trial pre_layer_norm=true dropout=false )

# The 8k-vocabulary trials' common settings: bert-tiny with 8,192 entries and the shards tokenized by that vocabulary.
_cpu_budget_8k_vocab_recipe() {
  _cpu_budget_recipe bert-tiny-8k-vocab.json
  local prep="${BERT_PREP_WORKING_DIR:-$_PRETRAIN_CONFIG_CODEDIR/data}/wikipedia-en-2015"
  DATA_DIR_PHASE1="$prep/pretrain-8k-vocab/phase1/unbinned/parquet"
  DATA_DIR_PHASE2="$prep/pretrain-8k-vocab/phase2/bin_size_64/parquet"
  trained_vocab_size=8192
}

# A budget-recipe trial: cpu_budget_tiny with an 8,192-entry WordPiece vocabulary trained on the corpus (argument
# 50) in place of BERT's 30,522: the masked-LM head's [hidden x vocab] products, which outweigh bert-tiny's encoder,
# shrink 3.7x, and words take 15% more pieces (1.53 a word against 1.33 on this corpus). Its shards are its own.
# It led the 20-minute trials (GLUE average 48.1 against 46.8) but not at 60 minutes (47.7 against 48.0;
# docs/time-to-quality-recipes-60.md), so it is not the README's preset.
cpu_budget_tiny_8k_vocab() (
  _cpu_budget_8k_vocab_recipe
  _print_cpu_preset_args
)

# A budget-recipe trial: cpu_budget_tiny masking 30% of each sequence's tokens (argument 40; Wettig et al. 2023,
# "Should You Mask 15% in Masked Language Modeling?", found 40% better than 15% for BERT-large) instead of 15%:
# twice the predictions a sequence, for the same encoder work. Validation still masks BERT's 15%.
cpu_budget_tiny_mask30() ( _cpu_budget_trial masked_lm_ratio=0.3 )

# A budget-recipe trial: cpu_budget_tiny at batch 16, the best of docs/time-to-quality-search.md's 5-minute trials
# (14.4% validation MLM accuracy where batch 64 reached 12.2%: more, smaller updates in the same time), validated on
# 80 batches of 16, the 1,280 sequences of the plain recipe's 20 batches of 64.
cpu_budget_tiny_batch16() ( _cpu_budget_trial "_batches 1 16 1 4 2" num_eval_batches=80 save_checkpoint_steps=2000 )

# A budget-recipe trial: cpu_budget_tiny with a gated-GELU feed-forward (argument 48; Shazeer 2020, "GLU Variants
# Improve Transformer", kept by ModernBERT): GELU(x W_gate) * (x W_up) at the same intermediate size, so the
# feed-forward's products grow 1.5x; at equal time that cost is counted. At 20 minutes: GLUE average 45.8 against
# the plain recipe's 46.8 (docs/time-to-quality-recipes.md), so it stays a trial.
cpu_budget_tiny_gated() ( _cpu_budget_trial gated_feed_forward=true )

# A budget-recipe trial: cpu_budget_tiny with a warmup-stable-decay schedule over the budget (arguments 5 and 34;
# Hu et al. 2024, MiniCPM; Hagele et al. 2024 found a 20% decay at the end matches cosine): the same 10% warmup,
# the peak held for 70% of the budget, then the linear decay to 0 in the last 20%, where the plain recipe decays
# over the whole 90% after warmup. At 20 minutes: GLUE average 46.1 against the plain recipe's 46.8
# (docs/time-to-quality-recipes.md), so it stays a trial.
cpu_budget_tiny_wsd() ( _cpu_budget_trial constant_proportion=0.7 )

# A budget-recipe trial: cpu_budget_tiny with a batch that ramps up (argument 51; Cramming, Geiping & Goldstein
# 2022): micro-batches of 16, one a step for the first eighth of the budget, then two, three, and from 37.5% on all
# four, the plain recipe's 64. docs/time-to-quality-search.md found batch 16 ahead at 5 minutes and 64 ahead at 20;
# this starts as the one and ends as the other. Validated on 80 batches of 16, the plain recipe's 1,280 sequences.
# At 20 minutes: GLUE average 45.3 against 46.8, the same validation MLM accuracy; it stays a trial.
cpu_budget_tiny_ramp() ( _cpu_budget_trial "_batches 1 16 4 4 2" gradient_merge_ramp=0.5 num_eval_batches=80 )

# A budget-recipe trial: cpu_budget_tiny without biases in the encoder's linear layers (argument 47; Cramming,
# Geiping & Goldstein 2022): fewer tensors for the optimizer and fewer additions a step, LayerNorm's shift kept.
# With the fine-tuning plan's rescaled embeddings and its rates (docs/time-to-quality-finetuning-rate.md): at 20
# minutes GLUE average 51.9 against its interleaved plain run's 51.4, the same validation MLM accuracy (14.7% against
# 14.8%; docs/time-to-quality-recipes-nobias-onecycle.md); at 60, 53.0 against 52.7 in 6,928 steps against 7,539
# (docs/time-to-quality-recipes-nobias-60.md), far from the 2 points it needs, so it stays a trial. (The old plan's
# 1e-4 had shown +2.8 at 20 minutes: its underfitting, not the option.)
cpu_budget_tiny_nobias() ( _cpu_budget_trial linear_bias=false )

# A budget-recipe trial: cpu_budget_tiny with a one-cycle schedule over the budget (argument 5; Smith & Topin 2019,
# "Super-Convergence", the triangular shape Cramming trains with): the linear warmup takes half the budget, so the
# peak comes at minute 10 of 20, and the linear decay to 0 takes the other half. At 20 minutes: GLUE average 51.4
# against 51.4, validation MLM accuracy 14.5% against 14.8% (docs/time-to-quality-recipes-nobias-onecycle.md): it
# stays a trial.
cpu_budget_tiny_onecycle() ( _cpu_budget_trial warmup_proportion=0.5 )

# A budget-recipe trial: cpu_budget_tiny with ALiBi's distance bias on the attention scores (argument 52; Press et
# al. 2022), beside the learned positions. Every 20-minute run above stayed at the copy floor (validation MLM
# accuracy 14.4-14.7%, where copying the unmasked input scores 14.5%: mlm_baselines.py), having learnt no context;
# the bias makes a token's neighbours weigh most in attention from the first step. At 20 minutes it reached 24.8%
# against a rerun of the plain recipe's 14.9% (docs/time-to-quality-recipes-alibi.md, scored with the old 1e-4
# plan). At 60 minutes 29.8% against 15.4%, and with today's fine-tuning plan GLUE average 53.5 against 52.7 and
# SQuAD F1 10.6 against 6.8 (docs/time-to-quality-recipes-alibi-60.md): short of the 2 GLUE points a preset needs,
# so it stays a trial.
cpu_budget_tiny_alibi() ( _cpu_budget_trial alibi=true )

# A budget-recipe trial: ALiBi (argument 52), the one option that leaves the copy floor, with bias-free linear layers
# (argument 47). At 20 minutes: validation MLM accuracy 24.9% against 14.8%, and with today's fine-tuning plan
# GLUE average 52.5 against 51.4, SQuAD F1 10.4 against 8.4 (docs/time-to-quality-recipes-alibi-nobias.md). At 60
# minutes on Zen 3: 29.5% against 15.1%, GLUE average 52.9 against 51.5, SQuAD F1 10.2 against 7.1
# (docs/time-to-quality-recipes-alibi-nobias-60.md): short of the 2 GLUE points a preset needs, so it stays a trial.
cpu_budget_tiny_alibi_nobias() ( _cpu_budget_trial alibi=true linear_bias=false )

# A budget-recipe trial: BERT's sequence-length schedule inside the budget (Devlin et al. 2019 took 90% of the
# steps at length 128 and the rest at 512; NVIDIA's two phases): the last tenth of the time (argument 53) is a phase
# 2 at 512 from phase 1's last checkpoint, at 16 sequences a step (phase 1's tokens a step), the phase-1 peak rate
# halved as NVIDIA's phase 2 lowers it, and its warmup. Phase 1's learned positions stop at 128; SQuAD fine-tunes
# at 256, which only phase 2 trains.
cpu_budget_tiny_seq512() (
  _cpu_budget_recipe bert-tiny-uncased.json
  _batches 1 64 1 16 1
  phase2_budget_share=0.1
  train_steps_phase2=10000000  # a cap the budget ends long before
  learning_rate_phase2=5e-3
  _print_cpu_preset_args
)

# A budget-recipe trial: the two options that gained at 20 minutes together, ALiBi (argument 52) and the 8k
# vocabulary trained on the corpus (argument 50, on cpu_budget_tiny_8k_vocab's shards). At 20 minutes: GLUE average
# 48.0 against ALiBi's 48.4 alone and the plain recipe's 46.7, SQuAD F1 9.0 against 8.4 and 7.4
# (docs/time-to-quality-recipes-alibi.md, the old 1e-4 fine-tuning plan): no gain over ALiBi alone; a trial.
cpu_budget_tiny_alibi_8k_vocab() (
  _cpu_budget_8k_vocab_recipe
  alibi=true
  _print_cpu_preset_args
)

cpu_budget_mini() (
  _cpu_budget_recipe bert-mini-uncased.json
  _print_cpu_preset_args
)

cpu_budget_small() (
  _cpu_budget_recipe bert-small-uncased.json
  _print_cpu_preset_args
)
