#!/usr/bin/env bash
# Reproduce docs/results.md: train every run below, score it on its recipe's test sets, then regenerate
# results/results.md, results/results.json, results/ablation.md and results/curves.png from the model directories,
# and docs/results.md from them.
#
#   scripts/reproduce_results.sh              # every run (about 15 hours on 2 cores)
#   scripts/reproduce_results.sh headline     # the chosen recipe only (about 5 hours)
#   scripts/reproduce_results.sh transformer  # the Transformer's runs (docs/transformer.md)
#   scripts/reproduce_results.sh all-ko-en-up4-lex ...   # only these runs, one after another
#   scripts/reproduce_results.sh --help       # this, and the names of the runs
#
# Only a run of every run rewrites results/results.md, ablation.md and their curves (and `transformer` its own
# tables); both then regenerate docs/results.md. `headline` and named runs print their table instead: results from
# some runs would replace the page's every-run tables, beside sections of other runs.
#
# The corpora come from $NMT_DATA_DIR when it names an offline mirror, else from the download cache or the network;
# the all-data recipe's python-docs-ko only from a mirror (docs/training.md#recipes).
#
# Without run names (or with `headline`) it trains two queues side by side, one core each (OMP_NUM_THREADS=1,
# logs in $MODELS/queue-1.log and queue-2.log), as the figures of docs/results.md were measured: the two members of
# every ensemble train at the same time, one per queue, and every run shares the machine with one other run. Then it
# scores the ensembles and regenerates the tables with all cores. Run it under nohup; it takes hours.
#
# Each run is resumable: run the script again after an interruption and an unfinished run continues (--resume)
# with its time budget counting the time already spent; a finished run is not trained or scored again. Stop it with
# Ctrl-C, or SIGTERM: to the script of a run of every run (or `headline`), which stops its queues, else to its whole
# process group (kill -TERM -- -PGID), as a lone SIGTERM to the script leaves its trainer running. Each
# direction of the all-data recipe trains for at most 2 hours (two members side by side, 2 hours each), the
# Tatoeba runs for at most 30 minutes (wall time, validation included). Never start two processes with 2 OpenMP
# threads each on a 2-core machine: they slow each other down ~20x.
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-models}
PY=${PYTHON:-python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

# Every run below was made before --bucketing existed, with the length-quantile buckets: pinned, as the other
# defaults that changed since. The en->ko runs chose their best checkpoint (and stopped early) by dev 13a BLEU, the
# default of then for every target language (now ko-mecab BLEU for Korean output): pinned with --valid-metric bleu.
EN_KO=(--src en --tgt ko --valid-metric bleu)
# Settings shared by the all-data runs (chosen on the Tatoeba ablations below; see docs/results.md).
ALL=(--recipe all --vocab-size 4000 --dropout 0.3 --label-smoothing 0.1 --batch-size 64 --valid-every 1000
     --patience 8 --keep-last 5 --average-last 5 --time-budget 7200 --attention dot --word-dropout 0
     --no-lexical-model --bucketing quantile)
# The Tatoeba-only runs: a 30-minute budget; the base of the ablations is the trainer's earlier defaults (no word
# dropout, no lexical model): the ablations below made word dropout 0.2 and then the lexical model the defaults.
TAT=(--recipe tatoeba --time-budget 1800 --keep-last 5 --average-last 5 --attention dot --word-dropout 0
     --no-lexical-model --bucketing quantile)
# Ensemble members: the defaults of then (word dropout 0.2, dot attention), 15 minutes each, no early stopping.
TAT15=(--recipe tatoeba --time-budget 900 --keep-last 5 --average-last 5 --attention dot --word-dropout 0.2 --patience 0
       --no-lexical-model --bucketing quantile)

# The Transformer (--arch transformer, its own defaults: docs/transformer.md): 30 minutes on Tatoeba alone, the
# ablations that choose its settings (one change each from tf-tatoeba-ko-en, compared on dev), and 2 hours on all
# data with the all-data recipe's settings. `scripts/reproduce_results.sh transformer` trains them in two queues,
# with the LSTM's Tatoeba run (abl-worddrop0.2-lex, its defaults) again beside them: the same hardware for both.
# The first round's base is the defaults of then, 3+3 layers (pinned: the ablations made 2+2 the default).
TF_TAT=(--recipe tatoeba --arch transformer --time-budget 1800 --keep-last 5 --average-last 5
        --encoder-layers 3 --decoder-layers 3)
# The second round of ablations starts from the first round's winner, 2+2 layers (tf-abl-layers2).
TF_TAT2=("${TF_TAT[@]}" --encoder-layers 2 --decoder-layers 2)
# The all-data runs take the ablations' winner: 2+2 layers (tf-abl-layers2).
TF_ALL=(--recipe all --arch transformer --vocab-size 4000 --label-smoothing 0.1 --batch-size 64 --valid-every 1000
        --patience 8 --keep-last 5 --average-last 5 --time-budget 7200 --upsample tatoeba-manythings=4
        --encoder-layers 2 --decoder-layers 2)

declare -A RUNS=(
  [all-ko-en]="--src ko --tgt en ${ALL[*]}"
  [all-en-ko]="${EN_KO[*]} ${ALL[*]}"
  # not in the default order (run it by name): the all-data mixture with Tatoeba weighted 4x
  [all-ko-en-up4]="--src ko --tgt en ${ALL[*]} --upsample tatoeba-manythings=4"
  [all-ko-en-up4-seed2]="--src ko --tgt en ${ALL[*]} --upsample tatoeba-manythings=4 --seed 2"
  # and with the lexical model, likewise a pair
  [all-ko-en-up4-lex]="--src ko --tgt en ${ALL[*]} --upsample tatoeba-manythings=4 --lexical-model"
  [all-ko-en-up4-lex-seed2]="--src ko --tgt en ${ALL[*]} --upsample tatoeba-manythings=4 --lexical-model --seed 2"
  # en->ko on the recipe of the ko->en pair above
  [all-en-ko-up4-lex]="${EN_KO[*]} ${ALL[*]} --upsample tatoeba-manythings=4 --lexical-model"
  [all-en-ko-up4-lex-seed2]="${EN_KO[*]} ${ALL[*]} --upsample tatoeba-manythings=4 --lexical-model --seed 2"
  [tatoeba-ko-en]="--src ko --tgt en ${TAT[*]}"
  # ablations (one setting changed from tatoeba-ko-en each, then combinations of the winners)
  [abl-vocab8k]="--src ko --tgt en ${TAT[*]} --vocab-size 8000"
  [abl-dropout0.2]="--src ko --tgt en ${TAT[*]} --dropout 0.2"
  [abl-ls0]="--src ko --tgt en ${TAT[*]} --label-smoothing 0"
  [abl-mlp]="--src ko --tgt en ${TAT[*]} --attention mlp"
  [abl-batch64]="--src ko --tgt en ${TAT[*]} --batch-size 64"
  [abl-plateau]="--src ko --tgt en ${TAT[*]} --lr-schedule plateau"
  [abl-worddrop0.1]="--src ko --tgt en ${TAT[*]} --word-dropout 0.1"
  [abl-subword0.2]="--src ko --tgt en ${TAT[*]} --subword-sampling 0.2"
  [abl-worddrop0.2]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2"
  [abl-worddrop0.3-dropout0.5]="--src ko --tgt en ${TAT[*]} --word-dropout 0.3 --dropout 0.5"
  [abl-worddrop0.2-mlp]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --attention mlp"
  # (queued as abl-plateau while the defaults were briefly mlp attention + word dropout 0.2: three changes)
  [abl-worddrop0.2-mlp-plateau]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --attention mlp --lr-schedule plateau"
  [abl-worddrop0.2-plateau]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --lr-schedule plateau"
  [abl-worddrop0.2-seed2]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --seed 2"
  # 1,200 pieces per language (Korean needs 1,169 for its 913 characters and the 256 byte-fallback pieces, so it is
  # nearly character-level), trained twice side by side like the seeds above, for an ensemble
  [abl-worddrop0.2-vocab1200]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --vocab-size 1200"
  [abl-worddrop0.2-vocab1200-seed2]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --vocab-size 1200 --seed 2"
  # the lexical model (Nguyen & Chiang 2018) on the ensemble's settings, two seeds side by side for an ensemble
  [abl-worddrop0.2-lex]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --lexical-model"
  [abl-worddrop0.2-lex-seed2]="--src ko --tgt en ${TAT[*]} --word-dropout 0.2 --lexical-model --seed 2"
  # four members of 15 minutes each (two at a time, one core each: 30 minutes of the 2-core machine), no early stop
  [ens15-seed1]="--src ko --tgt en ${TAT15[*]} --seed 1"
  [ens15-seed2]="--src ko --tgt en ${TAT15[*]} --seed 2"
  [ens15-seed3]="--src ko --tgt en ${TAT15[*]} --seed 3"
  [ens15-seed4]="--src ko --tgt en ${TAT15[*]} --seed 4"
  [tf-tatoeba-ko-en]="--src ko --tgt en ${TF_TAT[*]}"
  [tf-abl-warmup400-lr2e-3]="--src ko --tgt en ${TF_TAT[*]} --warmup-steps 400 --lr 2e-3"
  [tf-abl-shared4000]="--src ko --tgt en ${TF_TAT[*]} --shared-vocab --vocab-size 4000"
  [tf-abl-layers2]="--src ko --tgt en ${TF_TAT[*]} --encoder-layers 2 --decoder-layers 2"
  [tf-tatoeba-en-ko]="${EN_KO[*]} ${TF_TAT[*]}"
  # second round, one change from tf-abl-layers2 each: width, vocabulary size, heads, batch size, the attention and
  # activation dropouts
  [tf-abl2-ff1024]="--src ko --tgt en ${TF_TAT2[*]} --ff-size 1024"
  [tf-abl2-d128]="--src ko --tgt en ${TF_TAT2[*]} --model-size 128 --ff-size 256"
  [tf-abl2-vocab4000]="--src ko --tgt en ${TF_TAT2[*]} --vocab-size 4000"
  [tf-abl2-heads4]="--src ko --tgt en ${TF_TAT2[*]} --heads 4"
  [tf-abl2-batch64]="--src ko --tgt en ${TF_TAT2[*]} --batch-size 64"
  # heads 4 won dev by 0.74 (one seed): both again with a second seed, side by side
  [tf-abl2-seed2]="--src ko --tgt en ${TF_TAT2[*]} --seed 2"
  [tf-abl2-heads4-seed2]="--src ko --tgt en ${TF_TAT2[*]} --heads 4 --seed 2"
  [tf-abl2-attdrop0.3-actdrop0.3]="--src ko --tgt en ${TF_TAT2[*]} --attention-dropout 0.3 --activation-dropout 0.3"
  [tf-tatoeba-en-ko-layers2]="${EN_KO[*]} ${TF_TAT2[*]}"
  # the LSTM's defaults (the flags of abl-worddrop0.2-lex) en->ko: the LSTM row beside tf-tatoeba-en-ko-layers2
  [lstm-tatoeba-en-ko]="${EN_KO[*]} ${TAT[*]} --word-dropout 0.2 --lexical-model"
  [tf-all-ko-en]="--src ko --tgt en ${TF_ALL[*]}"
  [tf-all-en-ko]="${EN_KO[*]} ${TF_ALL[*]}"
  # why the Transformer loses at 2 hours on all data: one change from tf-all-ko-en each, side by side, compared on dev
  # (the defaults' depth; less regularization for a budget that ends before the model fits the data)
  [tf-all-abl-layers3]="--src ko --tgt en ${TF_ALL[*]} --encoder-layers 3 --decoder-layers 3"
  [tf-all-abl-dropout0.1]="--src ko --tgt en ${TF_ALL[*]} --dropout 0.1 --word-dropout 0"
)
TF_QUEUE_1=(tf-tatoeba-ko-en tf-abl-shared4000 tf-tatoeba-en-ko tf-all-ko-en tf-all-abl-layers3
            tf-tatoeba-en-ko-layers2 tf-abl2-heads4 tf-abl2-d128 tf-abl2-seed2 lstm-tatoeba-en-ko)
TF_QUEUE_2=(tf-abl-warmup400-lr2e-3 tf-abl-layers2 abl-worddrop0.2-lex tf-all-en-ko tf-all-abl-dropout0.1
            tf-abl2-ff1024 tf-abl2-batch64 tf-abl2-attdrop0.3-actdrop0.3 tf-abl2-heads4-seed2 tf-abl2-vocab4000)
# The two queues of a full run, one core each: the members of a pair (an ensemble, or runs compared in docs/results.md)
# at the same position, so that they train side by side. The chosen recipe first: the Tatoeba-only pair, then
# ko->en and en->ko on all data.
HEADLINE_1=(abl-worddrop0.2-lex all-ko-en-up4-lex all-en-ko-up4-lex)
HEADLINE_2=(abl-worddrop0.2-lex-seed2 all-ko-en-up4-lex-seed2 all-en-ko-up4-lex-seed2)
QUEUE_1=("${HEADLINE_1[@]}" abl-worddrop0.2 all-ko-en-up4 abl-worddrop0.2-vocab1200 ens15-seed1 ens15-seed3
         tatoeba-ko-en all-ko-en abl-ls0 abl-mlp abl-batch64 abl-plateau abl-worddrop0.2-mlp-plateau
         abl-worddrop0.2-plateau)
QUEUE_2=("${HEADLINE_2[@]}" abl-worddrop0.2-seed2 all-ko-en-up4-seed2 abl-worddrop0.2-vocab1200-seed2 ens15-seed2
         ens15-seed4 abl-vocab8k all-en-ko abl-dropout0.2 abl-worddrop0.1 abl-subword0.2 abl-worddrop0.3-dropout0.5
         abl-worddrop0.2-mlp)

known_runs() { printf '%s\n' "${!RUNS[@]}" | sort | tr '\n' ' '; }
if [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; then   # the header above, and the names it takes
  sed -n '2,/^set -euo/p' scripts/reproduce_results.sh | sed '$d; s/^# \{0,1\}//'
  echo; echo "Groups: headline transformer"; echo "Runs: $(known_runs)"
  exit 0
fi
for name in "$@"; do
  if [ "$name" = headline ] || [ "$name" = transformer ]; then
    [ $# = 1 ] || { echo "$name stands alone (it names a group of runs); got: $*" >&2; exit 2; }
  elif [ -z "${RUNS[$name]+x}" ]; then
    echo "unknown run $name (groups: headline transformer; runs: $(known_runs| sed 's/ $//'); --help says more)" >&2; exit 2
  fi
done
stop_queues() {   # SIGTERM/Ctrl-C: stop the queues, then let their trainers save a checkpoint and exit
  local p c kids trainers=()
  for p in "$@"; do
    kids=$(pgrep -P "$p" || true)
    kill -TERM "$p" 2>/dev/null || true   # first the queue, so that it starts nothing new
    for c in $kids; do kill -TERM "$c" 2>/dev/null && trainers+=("$c"); done
  done
  for c in "${trainers[@]}"; do while kill -0 "$c" 2>/dev/null; do sleep 1; done; done
  echo "stopped; run the script again to resume" >&2
  exit 143
}
if [ $# -eq 0 ] || [ "$*" = headline ] || [ "$*" = transformer ]; then
  case "$*" in
    "") q1=("${QUEUE_1[@]}"); q2=("${QUEUE_2[@]}") ;;
    headline) q1=("${HEADLINE_1[@]}"); q2=("${HEADLINE_2[@]}") ;;
    transformer) q1=("${TF_QUEUE_1[@]}"); q2=("${TF_QUEUE_2[@]}") ;;
  esac
  mkdir -p "$MODELS"
  echo "== queue 1 (log: $MODELS/queue-1.log): ${q1[*]}"
  echo "== queue 2 (log: $MODELS/queue-2.log): ${q2[*]}"
  # each queue trains and scores its runs only; ensembles and tables once both are done, here
  REPRODUCE_QUEUE=1 OMP_NUM_THREADS=1 bash "$0" "${q1[@]}" > "$MODELS/queue-1.log" 2>&1 & p1=$!
  REPRODUCE_QUEUE=1 OMP_NUM_THREADS=1 bash "$0" "${q2[@]}" > "$MODELS/queue-2.log" 2>&1 & p2=$!
  trap 'stop_queues $p1 $p2' TERM INT
  failed=0
  wait $p1 || { echo "queue 1 failed: see $MODELS/queue-1.log" >&2; failed=1; }
  wait $p2 || { echo "queue 2 failed: see $MODELS/queue-2.log" >&2; failed=1; }
  trap - TERM INT
  [ $failed = 0 ] || exit 1
  if [ "$*" = transformer ]; then   # its own tables: results/transformer.md and transformer-ablation.md
    tfs=()
    for d in "$MODELS"/tf-* "$MODELS"/abl-worddrop0.2-lex "$MODELS"/lstm-tatoeba-en-ko; do
      [ -f "$d/state.json" ] && tfs+=("$d")
    done
    hardware="$(getconf _NPROCESSORS_ONLN)-core CPU, 1 OpenMP thread(s) per run"   # (runs that did not record it)
    "$PY" scripts/results_table.py "${tfs[@]}" --markdown results/transformer.md --json results/transformer.json \
      --examples 5 --hardware "$hardware"
    abl=(); for d in "$MODELS"/tf-tatoeba-ko-en "$MODELS"/tf-abl-*; do [ -f "$d/state.json" ] && abl+=("$d"); done
    "$PY" scripts/results_table.py "${abl[@]}" --ablation-base "$MODELS/tf-tatoeba-ko-en" --ablation-test tatoeba-test \
      --markdown results/transformer-ablation.md --hardware "$hardware"
    abl=(); for d in "$MODELS"/tf-abl-layers2 "$MODELS"/tf-abl2-*; do [ -f "$d/state.json" ] && abl+=("$d"); done
    "$PY" scripts/results_table.py "${abl[@]}" --ablation-base "$MODELS/tf-abl-layers2" --ablation-test tatoeba-test \
      --markdown results/transformer-ablation2.md --curves results/transformer-ablation2-curves.png \
      --hardware "$hardware"
    all=(); for d in "$MODELS"/tf-all-ko-en "$MODELS"/tf-all-abl-*; do [ -f "$d/state.json" ] && all+=("$d"); done
    "$PY" scripts/results_table.py "${all[@]}" --ablation-base "$MODELS/tf-all-ko-en" --ablation-test tatoeba-test \
      --markdown results/transformer-all-ablation.md --curves results/transformer-all-ablation-curves.png \
      --hardware "$hardware"
    if [ -f results/results.md ]; then "$PY" scripts/results_table.py --docs docs/results.md; fi   # (it holds them)
    exit 0
  fi
  ORDER=()
else
  ORDER=("$@")
fi

stopped() {   # why the run in $1 stopped ("" while unfinished or never started)
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("stopped") or "")' "$1/state.json" 2>/dev/null || true
}
finished() {  # whether the run in $1 ended by one of its own limits (not interrupted, not still to run)
  case "$(stopped "$1")" in early_stop|max_epochs|time_budget|max_steps) return 0 ;; *) return 1 ;; esac
}
scored() {    # whether checkpoint $2 of the run in $1 has scores on each of its own test sets (not the dev set's)
  "$PY" -c '
import json, os, sys
run, key = sys.argv[1:]   # (nmt.scoring.model_test_sets: the same names, read without importing nmt or MXNet)
recipes = json.load(open("nmt/recipes.json"))["recipes"]
s, config = json.load(open(os.path.join(run, "scores.json"))), os.path.join(run, "config.json")
data = json.load(open(config))["data"] if os.path.exists(config) else None
names = [n for n in s if n != "dev"] if data is None else ["test"] if data["test_src"] and data["test_tgt"] else \
    list(recipes[data["recipe"]]["tests"]) if data["recipe"] in recipes else []
sys.exit(0 if names and all(key in s.get(n, {}) for n in names) else 1)' "$1" "$2" 2>/dev/null
}
score_checkpoints() {   # test scores of the best and the averaged checkpoint of the run in $1, where missing
  scored "$1" best || "$PY" scripts/evaluate.py --model-dir "$1" --recipe-tests
  if [ -f "$1/params.avg" ] && ! scored "$1" avg; then
    "$PY" scripts/evaluate.py --model-dir "$1" --checkpoint avg --recipe-tests
  fi
}

for name in "${ORDER[@]}"; do
  flags=${RUNS[$name]}
  dir="$MODELS/$name"
  if finished "$dir"; then
    echo "== $name: finished earlier ($(stopped "$dir"))"
    score_checkpoints "$dir"
    continue
  fi
  resume=()
  [ -f "$dir/state.json" ] && resume=(--resume)
  echo "== $name: training ${resume[*]} (log: $dir/train.log)"
  # shellcheck disable=SC2086
  "$PY" scripts/train.py $flags --model-dir "$dir" --no-progress "${resume[@]}"
  if finished "$dir"; then score_checkpoints "$dir"; fi
done

[ -n "${REPRODUCE_QUEUE:-}" ] && exit 0   # a queue of a full run: the parent does the rest

# Decoding ablations on the Tatoeba run: beam size, length penalty, checkpoint averaging (no retraining).
base="$MODELS/tatoeba-ko-en"
if [ $# -eq 0 ] && [ -f "$base/params.best" ]; then
  mkdir -p results/decode-ablation
  for setting in "--beam-size 1" "--beam-size 5 --length-penalty 0" "--beam-size 5 --length-penalty 1.0" \
                 "--beam-size 10"; do
    tag=$(echo "$setting" | tr -d '-' | tr ' ' '_')
    [ "results/decode-ablation/$tag.json" -nt "$base/params.best" ] && continue   # done for this checkpoint
    "$PY" scripts/evaluate.py --model-dir "$base" --recipe-tests $setting --no-save \
      --json "results/decode-ablation/$tag.json" > /dev/null
  done
fi

# Ensembles, each decoded from its members' averaged checkpoints once all have finished (scores recorded in the
# first member's scores.json). The Tatoeba ones train on the 2-core machine in 30 minutes, one core per member:
# two members of 30 minutes side by side, or four of 15 minutes two at a time; the all-data ones in 2 hours, their
# two members side by side.
# The chosen recipe's first: the results table lists the runs in this order.
ENSEMBLES=("abl-worddrop0.2-lex abl-worddrop0.2-lex-seed2" "all-ko-en-up4-lex all-ko-en-up4-lex-seed2"
           "all-en-ko-up4-lex all-en-ko-up4-lex-seed2" "all-ko-en-up4 all-ko-en-up4-seed2"
           "abl-worddrop0.2 abl-worddrop0.2-seed2" "ens15-seed1 ens15-seed2 ens15-seed3 ens15-seed4"
           "abl-worddrop0.2-vocab1200 abl-worddrop0.2-vocab1200-seed2")
leads=()
for members in "${ENSEMBLES[@]}"; do
  read -r -a names <<< "$members"
  lead="$MODELS/${names[0]}"; others=(); ready=1
  for name in "${names[@]}"; do
    finished "$MODELS/$name" || ready=0
  done
  [ $ready = 1 ] || continue
  leads+=("$lead")
  for name in "${names[@]:1}"; do others+=("$MODELS/$name"); done
  if ! scored "$lead" "ensemble-avg:$(IFS=+; echo "${names[*]:1}")"; then   # nmt.scoring.ensemble_key
    "$PY" scripts/evaluate.py --model-dir "$lead" --ensemble "${others[@]}" --checkpoint avg --recipe-tests
  fi
done

mains=(); abls=()
for d in "${leads[@]}" "$MODELS"/all-ko-en "$MODELS"/all-en-ko "$MODELS"/tatoeba-ko-en; do
  [ -f "$d/state.json" ] && mains+=("$d")
done
for d in "$MODELS"/tatoeba-ko-en "$MODELS"/abl-*; do [ -f "$d/state.json" ] && abls+=("$d"); done
hardware="$(getconf _NPROCESSORS_ONLN)-core CPU, 1 OpenMP thread(s) per run"
if [ $# -gt 0 ]; then   # `headline` or named runs: their table, on the console (see the top)
  ran=()   # the runs named (their ensembles with the leads), or headline's ensembles
  named=("${ORDER[@]/#/$MODELS/}")
  [ ${#ORDER[@]} -gt 0 ] || named=("${leads[@]}")
  for d in "${named[@]}"; do
    [ -f "$d/state.json" ] && [[ " ${ran[*]} " != *" $d "* ]] && ran+=("$d")
  done
  if [ ${#ran[@]} -gt 0 ]; then "$PY" scripts/results_table.py "${ran[@]}" --hardware "$hardware"; fi
  echo "== results/ and docs/results.md are left as they were: only a run of every run rewrites them" >&2
  exit 0
fi
if [ ${#mains[@]} -gt 0 ]; then
  # --hardware labels the runs whose state.json predates its hardware record: all of them trained in this script's
  # two one-core queues (not at the OMP_NUM_THREADS of whatever invocation regenerates the tables)
  "$PY" scripts/results_table.py "${mains[@]}" --markdown results/results.md --json results/results.json \
    --curves results/curves.png --examples 5 --hardware "$hardware"
fi
if [ ${#abls[@]} -gt 1 ] && [ -f "$base/state.json" ]; then
  decodes=(); for f in results/decode-ablation/*.json; do [ -f "$f" ] && decodes+=("$f"); done
  "$PY" scripts/results_table.py "${abls[@]}" --ablation-base "$base" --ablation-test tatoeba-test \
    --decode-ablations "${decodes[@]}" --markdown results/ablation.md --curves results/ablation-curves.png \
    --hardware "$hardware"
fi
if [ -f results/results.md ]; then "$PY" scripts/results_table.py --docs docs/results.md; fi
