// CPU kernels for the search step and the data-parallel gradient sum (see nmt/native.py), loaded into MXNet as
// an operator library (lib_api.h). No backward. Built on the machine that runs them (-march=native) by nmt.native.
//
//   nmt_lstm_cell(gx (N,4H), gh (N,4H), c (N,H)) -> h (N,H), c_new (N,H)
//       one LSTM cell from its two gate products (input and recurrent), gate order i, f, g, o as MXNet's fused
//       RNN kernel: replaces an add, four slices, five activations and four element-wise ops.
//   nmt_attention(query (B,T,H), values (B,S,H), lengths (B,)) -> context (B,T,H), weights (B,T,S)
//       dot-product attention of each row's T queries over the first max(1, length) of its S values (softmax
//       weights 0 beyond): replaces two batch_dot (MXNet's bundled OpenBLAS runs generic kernels here), the
//       length mask and the softmax.
//   nmt_row_topk(x (N,V), k) -> values (N,k), indices (N,k) as float
//       the k largest of each row, best first, the lower index first among equal values: one pass over the
//       row that skips each 32-value chunk none of whose values beats the current k-th best.
//   nmt_beam_update(cand_lp (N,R), cand_tok (N,R), scores, lengths, finished, limits (N,), t (1,), lp_table (T,),
//                   beam=K, nbest, eos) -> token, scores, lengths, finished (N,), t + 1 (1,), rows, emitted (N,),
//                   sentence_done (N/K,)
//       the beam search's update after the row top-k (nmt.search_graph.BeamStep's MXNet operators, the same float
//       arithmetic): candidate scores with the length penalty, each sentence's top K of its K*R candidates (the
//       lower index first among equal scores, as MXNet's topk), back-pointers, new lengths, finished and emitted
//       tokens, and whether each sentence is done (and, nbest > 0, settled). One thread: ~40 small operators,
//       each paying OpenMP's fork and join, become one pass over a few hundred values.
//   nmt_masked_fc(x (...,K), skip (N,), w (O,K), [b (O,)], no_bias) -> y (...,O)
//       FullyConnected (flatten=False) on the rows of x (N: all axes but the last) whose skip is 0; the others
//       come out 0. The search passes its finished hypotheses as skipped: their decoder step is never used (late
//       in a batch a fifth of the rows). Its own AVX2/FMA product: 16-column panels of w packed on the fly, 6
//       rows at a time read in place and written in place (no gather, no scatter). Built for CPUs with AVX2 and
//       FMA but not AVX-512 (see NMT_HAVE_AVX2).
//   nmt_add_sumsq(a_1..a_n, b_1..b_n, ..., num_arrays=n, num_replicas=R) -> sumsq (1,)
//       a_i += b_i (+ the further replicas' b_i) in place, and the sum of squares of all the new a_i: the
//       gradient sum of CPU replicas and its norm in one pass over the arrays, where elemwise_add then
//       multi_sum_sq take two (and 5.5x the time). The inputs may live on different CPU contexts (one memory); it
//       runs on the first input's. With R = 1 only the sum of squares (the norm of one context's gradients).
//   nmt_adam(w_1..w_n, g_1..g_n, m_1..m_n, v_1..v_n, num_arrays=n, lrs, wds, beta1, beta2, epsilon, rescale_grad,
//            clip_gradient) -> done (1,), a zero (an operator needs an output)
//       MXNet's adam_update of n parameters in place (w, m, v), the same float arithmetic in the same order (so the
//       same bits), vectorized: MXNet's per-element kernel computes its square root and division one value at a
//       time and took 22 ms for 5.8 M parameters where 7 memory streams need ~8 (`lrs`, `wds`: one per array,
//       comma-separated; clip_gradient < 0: no clipping).
//   nmt_pin_thread(x, cores) -> status (1,)
//       binds the engine thread that runs it (its input's CPU context's worker) to the listed cores: CPU contexts
//       side by side each keep a core of their own (see nmt.parallel.pin_context_threads).
#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"
// nmt_masked_fc is built for AVX2 with FMA. With AVX-512 oneDNN's products (MXNet's FullyConnected) are twice as
// wide as this kernel, so there the search keeps them (not measured: no such host here).
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
#define NMT_HAVE_AVX2 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

using namespace mxnet::ext;
using Attrs = std::unordered_map<std::string, std::string>;

// Work (elements) from which a kernel splits its rows over OpenMP's threads (OMP_NUM_THREADS, as MXNet's own
// CPU operators; the same libgomp); below it, fork and join would cost more than they save.
constexpr int64_t kParallelMin = 16384;

// exp(x), written so that the compiler vectorizes the loops that call it: 2^n p(r) with n = round(x / ln 2),
// r = x - n ln 2 (ln 2 in two parts, exact first), p the degree-6 Taylor polynomial of exp on |r| <= ln2/2;
// relative error about 2e-7 on the clamped range [-87, 88].
static inline float exp_(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union { int32_t i; float f; } scale;
  scale.i = (static_cast<int32_t>(n) + 127) << 23;
  return p * scale.f;
}
static inline float sigmoid_(float x) { return 1.0f / (1.0f + exp_(-x)); }
static inline float tanh_(float x) { return 2.0f / (1.0f + exp_(-2.0f * x)) - 1.0f; }

// Gluon's CachedOp builds a backward graph for every operator it holds, so each names one; it fails if run.
MXReturnValue noBackward(const Attrs&, std::vector<MXTensor>*, std::vector<MXTensor>*, const OpResource&) {
  MX_ERROR_MSG << "the nmt native operators have no backward";
  return MX_FAIL;
}

// Input and output counts of the operators whose counts are fixed.
template <int In, int Out>
MXReturnValue arity(const Attrs&, int* num_in, int* num_out) {
  *num_in = In;
  *num_out = Out;
  return MX_SUCCESS;
}

// Registers an operator: forward only (see noBackward), on the CPU; one that writes its inputs appends
// .setMutateInputs(...). A parse function with template arguments goes in parentheses: (arity<3, 2>).
#define NMT_REGISTER_OP(name, forward, parse, type, shape)                                                      \
  REGISTER_OP(name).setForward(forward, "cpu").setBackward(noBackward, "cpu").setParseAttrs(parse)              \
      .setInferType(type).setInferShape(shape)

// An integer attribute (nmt_row_topk's k, the counts of nmt_add_sumsq and nmt_adam); 0 when absent.
static int intAttr(const Attrs& attrs, const char* name) {
  auto it = attrs.find(name);
  return it == attrs.end() ? 0 : std::stoi(it->second);
}

MXReturnValue floatOnly(const char* op, const std::vector<int>& in, std::vector<int>* out) {
  for (int t : in)
    if (t != kFloat32) {
      MX_ERROR_MSG << op << ": float32 inputs only";
      return MX_FAIL;
    }
  for (auto& t : *out) t = kFloat32;
  return MX_SUCCESS;
}

// ---- nmt_lstm_cell ---------------------------------------------------------------------------------------------
MXReturnValue cellForward(const Attrs&, std::vector<MXTensor>* in, std::vector<MXTensor>* out, const OpResource&) {
  const float* gx = in->at(0).data<float>();
  const float* gh = in->at(1).data<float>();
  const float* c = in->at(2).data<float>();
  float* h = out->at(0).data<float>();
  float* c_new = out->at(1).data<float>();
  const int64_t N = in->at(2).shape[0], H = in->at(2).shape[1];
#pragma omp parallel for schedule(static) if (N * H >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ a = gx + n * 4 * H;
    const float* __restrict__ b = gh + n * 4 * H;
    const float* __restrict__ cp = c + n * H;
    float* __restrict__ hp = h + n * H;
    float* __restrict__ cq = c_new + n * H;
#pragma GCC ivdep
    for (int64_t j = 0; j < H; ++j) {
      const float i = sigmoid_(a[j] + b[j]);
      const float f = sigmoid_(a[H + j] + b[H + j]);
      const float g = tanh_(a[2 * H + j] + b[2 * H + j]);
      const float o = sigmoid_(a[3 * H + j] + b[3 * H + j]);
      const float cc = f * cp[j] + i * g;
      cq[j] = cc;
      hp[j] = o * tanh_(cc);
    }
  }
  return MX_SUCCESS;
}
MXReturnValue cellType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_lstm_cell", *in, out);
}
MXReturnValue cellShape(const Attrs&, std::vector<std::vector<unsigned int>>* in,
                        std::vector<std::vector<unsigned int>>* out) {
  const auto& gx = in->at(0);
  const auto& c = in->at(2);
  if (c.size() != 2 || gx.size() != 2 || gx[0] != c[0] || gx[1] != 4 * c[1] || in->at(1) != gx) {
    MX_ERROR_MSG << "nmt_lstm_cell: expects gates (N,4H), (N,4H) and cell state (N,H)";
    return MX_FAIL;
  }
  out->at(0) = c;
  out->at(1) = c;
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_lstm_cell, cellForward, (arity<3, 2>), cellType, cellShape);

// ---- nmt_attention ---------------------------------------------------------------------------------------------
MXReturnValue attentionForward(const Attrs&, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                               const OpResource&) {
  const float* query = in->at(0).data<float>();
  const float* values = in->at(1).data<float>();
  const float* lengths = in->at(2).data<float>();
  float* context = out->at(0).data<float>();
  float* weights = out->at(1).data<float>();
  const int64_t B = in->at(0).shape[0], T = in->at(0).shape[1], H = in->at(0).shape[2], S = in->at(1).shape[1];
  const int64_t L = 16;   // partial sums per dot product, so that the compiler vectorizes it
#pragma omp parallel for schedule(static) if (B * T * S * H >= 8 * kParallelMin)
  for (int64_t b = 0; b < B; ++b) {
    const float len = lengths[b];
    const int64_t n = len < 1.0f ? 1 : (len >= static_cast<float>(S) ? S : static_cast<int64_t>(std::ceil(len)));
    const float* __restrict__ v = values + b * S * H;
    for (int64_t t = 0; t < T; ++t) {
      const float* __restrict__ q = query + (b * T + t) * H;
      float* __restrict__ w = weights + (b * T + t) * S;
      float* __restrict__ c = context + (b * T + t) * H;
      float top = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        float part[L] = {0};
        int64_t h = 0;
        for (; h + L <= H; h += L)
          for (int64_t j = 0; j < L; ++j) part[j] += q[h + j] * v[s * H + h + j];
        float dot = 0.0f;
        for (int64_t j = 0; j < L; ++j) dot += part[j];
        for (; h < H; ++h) dot += q[h] * v[s * H + h];
        w[s] = dot;
        top = dot > top ? dot : top;
      }
      float total = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        w[s] = exp_(w[s] - top);
        total += w[s];
      }
      const float inv = 1.0f / total;
      for (int64_t s = 0; s < n; ++s) w[s] *= inv;
      for (int64_t s = n; s < S; ++s) w[s] = 0.0f;
      for (int64_t h = 0; h < H; ++h) c[h] = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        const float a = w[s];
        const float* __restrict__ vs = v + s * H;
#pragma GCC ivdep
        for (int64_t h = 0; h < H; ++h) c[h] += a * vs[h];
      }
    }
  }
  return MX_SUCCESS;
}
MXReturnValue attentionType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_attention", *in, out);
}
MXReturnValue attentionShape(const Attrs&, std::vector<std::vector<unsigned int>>* in,
                             std::vector<std::vector<unsigned int>>* out) {
  const auto& q = in->at(0);
  const auto& v = in->at(1);
  const auto& len = in->at(2);
  if (q.size() != 3 || v.size() != 3 || len.size() != 1 || v[0] != q[0] || v[2] != q[2] || len[0] != q[0]) {
    MX_ERROR_MSG << "nmt_attention: expects queries (B,T,H), values (B,S,H) and lengths (B,)";
    return MX_FAIL;
  }
  out->at(0) = q;
  out->at(1) = {q[0], q[1], v[1]};
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_attention, attentionForward, (arity<3, 2>), attentionType, attentionShape);

// Offers value s (index v) to the sorted k best so far (best[0..filled), their indices at[]): strict, so that
// among equal values the one offered first stays ahead, as MXNet's topk keeps the lower index.
static inline void offerTopK(float s, int64_t v, int k, int& filled, float* best, int64_t* at) {
  if (filled == k && !(s > best[k - 1])) return;
  int p = filled < k ? filled++ : k - 1;
  for (; p > 0 && s > best[p - 1]; --p) {
    best[p] = best[p - 1];
    at[p] = at[p - 1];
  }
  best[p] = s;
  at[p] = v;
}

// ---- nmt_row_topk ----------------------------------------------------------------------------------------------
MXReturnValue topkForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                          const OpResource&) {
  const float* x = in->at(0).data<float>();
  float* values = out->at(0).data<float>();
  float* indices = out->at(1).data<float>();
  const int64_t N = in->at(0).shape[0], V = in->at(0).shape[1];
  const int k = intAttr(attrs, "k");
  const int64_t C = 32;
#pragma omp parallel if (N * V >= 8 * kParallelMin)
  {
  std::vector<float> best(k);
  std::vector<int64_t> at(k);
#pragma omp for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict__ row = x + n * V;
    int filled = 0;
    auto offer = [&](float s, int64_t v) { offerTopK(s, v, k, filled, best.data(), at.data()); };
    int64_t v = 0;
    for (; v < V && filled < k; ++v) offer(row[v], v);
    for (; v + C <= V; v += C) {
      const float t = best[k - 1];
      int any = 0;   // an OR of comparisons (vectorized), not a max (which NaN semantics keep scalar)
      for (int64_t j = 0; j < C; ++j) any |= row[v + j] > t;
      if (!any) continue;
      for (int64_t j = 0; j < C; ++j) offer(row[v + j], v + j);
    }
    for (; v < V; ++v) offer(row[v], v);
    for (int j = 0; j < k; ++j) {
      values[n * k + j] = best[j];
      indices[n * k + j] = static_cast<float>(at[j]);
    }
  }
  }
  return MX_SUCCESS;
}
MXReturnValue topkType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_row_topk", *in, out);
}
MXReturnValue topkShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                        std::vector<std::vector<unsigned int>>* out) {
  const int k = intAttr(attrs, "k");
  const auto& x = in->at(0);
  if (x.size() != 2 || k < 1 || static_cast<unsigned>(k) > x[1]) {
    MX_ERROR_MSG << "nmt_row_topk: expects an (N,V) input and 1 <= k <= V";
    return MX_FAIL;
  }
  out->at(0) = {x[0], static_cast<unsigned>(k)};
  out->at(1) = {x[0], static_cast<unsigned>(k)};
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_row_topk, topkForward, (arity<1, 2>), topkType, topkShape);

// ---- nmt_beam_update -------------------------------------------------------------------------------------------
MXReturnValue beamUpdateForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                                const OpResource&) {
  const float* cand_lp = in->at(0).data<float>();
  const float* cand_tok = in->at(1).data<float>();
  const float* scores = in->at(2).data<float>();
  const float* lengths = in->at(3).data<float>();
  const float* finished = in->at(4).data<float>();
  const float* limits = in->at(5).data<float>();
  const float t = in->at(6).data<float>()[0];
  const float* lp_table = in->at(7).data<float>();
  float* token = out->at(0).data<float>();
  float* new_scores = out->at(1).data<float>();
  float* new_lengths = out->at(2).data<float>();
  float* new_finished = out->at(3).data<float>();
  float* rows = out->at(5).data<float>();
  float* emitted = out->at(6).data<float>();
  float* done = out->at(7).data<float>();
  const int64_t N = in->at(0).shape[0], R = in->at(0).shape[1], T = in->at(7).shape[0];
  const int K = intAttr(attrs, "beam"), nbest = intAttr(attrs, "nbest");
  const float eos = static_cast<float>(intAttr(attrs, "eos")), t1 = t + 1.0f;
  out->at(4).data<float>()[0] = t1;
  auto penalty = [&](float index) {   // lp_table[index], the index clipped as MXNet's take does
    const int64_t i = static_cast<int64_t>(index);
    return lp_table[i < 0 ? 0 : (i >= T ? T - 1 : i)];
  };
  std::vector<float> raw(K * R), norm(K * R), best(K);
  std::vector<int64_t> at(K);
  std::vector<char> fin(K);
  for (int64_t b = 0; b < N / K; ++b) {
    const int64_t first = b * K;
    for (int i = 0; i < K; ++i) {   // candidates: a finished hypothesis has one, itself under EOS, unchanged
      const int64_t row = first + i;
      fin[i] = finished[row] != 0.0f || limits[row] <= t;
      const float pen = penalty(lengths[row] + 1.0f - (fin[i] ? 1.0f : 0.0f));
      for (int64_t j = 0; j < R; ++j) {
        const float lp = fin[i] ? (j == 0 ? 0.0f : -INFINITY) : cand_lp[row * R + j];
        raw[i * R + j] = lp + scores[row];
        norm[i * R + j] = raw[i * R + j] / pen;
      }
    }
    int filled = 0;   // the K best of the K*R, best first, the lower index first among equal ones
    for (int64_t c = 0; c < K * R; ++c) offerTopK(norm[c], c, K, filled, best.data(), at.data());
    bool all_done = true;
    for (int k = 0; k < K; ++k) {
      const int64_t slot = first + k, c = at[k], beam = c / R, src = first + beam;
      const float score = raw[c], tok = fin[beam] ? eos : cand_tok[src * R + c % R];
      const bool was_fin = fin[beam] != 0, is_eos = tok == eos;
      token[slot] = tok;
      new_scores[slot] = score;
      rows[slot] = static_cast<float>(src);
      new_lengths[slot] = lengths[src] + 1.0f - (was_fin ? 1.0f : 0.0f);
      const bool now_fin = was_fin || is_eos || score == -INFINITY;
      new_finished[slot] = now_fin ? 1.0f : 0.0f;
      emitted[slot] = was_fin || is_eos ? -1.0f : tok;
      all_done = all_done && (now_fin || limits[slot] <= t1);
    }
    if (!all_done && nbest > 0) {   // settled: see nmt.search_graph.BeamStep._settled
      std::vector<float> fin_norm(K);
      float best_active = -INFINITY;
      for (int k = 0; k < K; ++k) {
        const int64_t slot = first + k;
        fin_norm[k] = new_finished[slot] != 0.0f ? new_scores[slot] / penalty(new_lengths[slot]) : -INFINITY;
        if (new_finished[slot] == 0.0f) {
          const float bound = new_scores[slot] / penalty(limits[slot] + 1.0f);
          best_active = bound > best_active ? bound : best_active;
        }
      }
      std::sort(fin_norm.begin(), fin_norm.end(), [](float x, float y) { return x > y; });
      const float nth = fin_norm[nbest - 1];
      all_done = nth > -INFINITY && nth >= best_active;
    }
    done[b] = all_done ? 1.0f : 0.0f;
  }
  return MX_SUCCESS;
}
MXReturnValue beamUpdateType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_beam_update", *in, out);
}
MXReturnValue beamUpdateShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                              std::vector<std::vector<unsigned int>>* out) {
  const int K = intAttr(attrs, "beam"), nbest = intAttr(attrs, "nbest");
  const auto& lp = in->at(0);
  bool ok = lp.size() == 2 && K >= 1 && nbest >= 0 && nbest <= K && lp[0] % K == 0 && in->at(1) == lp &&
            in->at(6) == std::vector<unsigned int>{1} && in->at(7).size() == 1 && in->at(7)[0] >= 1;
  for (int i = 2; ok && i < 6; ++i) ok = in->at(i) == std::vector<unsigned int>{lp.size() == 2 ? lp[0] : 0};
  if (!ok) {
    MX_ERROR_MSG << "nmt_beam_update: expects candidates (N,R) twice, scores, lengths, finished and limits (N,), "
                    "t (1,), lp_table (T,), N a multiple of beam >= 1, 0 <= nbest <= beam";
    return MX_FAIL;
  }
  const unsigned n = lp[0];
  for (int i = 0; i < 7; ++i) out->at(i) = {n};
  out->at(4) = {1};
  out->at(7) = {n / static_cast<unsigned>(K)};
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_beam_update, beamUpdateForward, (arity<8, 8>), beamUpdateType, beamUpdateShape);

#ifdef NMT_HAVE_AVX2
// ---- nmt_masked_fc ---------------------------------------------------------------------------------------------
MXReturnValue maskedFcArity(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = intAttr(attrs, "no_bias") ? 3 : 4;
  *num_out = 1;
  return MX_SUCCESS;
}
constexpr int kPanel = 16;   // output columns per panel: two 8-float registers
constexpr int kRowBlock = 6;  // rows per block: 12 accumulators

// y[rows[r], o:o+16] = bias[0:16] + x[rows[r], :] . pack, for M rows; pack (K,16) holds the panel's weights.
template <int M>
static inline void panelRows(const float* __restrict__ x, int64_t K, const int64_t* rows,
                             const float* __restrict__ pack, const float* bias16, float* out[M]) {
  __m256 c0[M], c1[M];
  const float* xr[M];
  for (int r = 0; r < M; ++r) {
    c0[r] = bias16 ? _mm256_loadu_ps(bias16) : _mm256_setzero_ps();
    c1[r] = bias16 ? _mm256_loadu_ps(bias16 + 8) : _mm256_setzero_ps();
    xr[r] = x + rows[r] * K;
  }
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_load_ps(pack + k * kPanel), b1 = _mm256_load_ps(pack + k * kPanel + 8);
    for (int r = 0; r < M; ++r) {
      const __m256 a = _mm256_broadcast_ss(xr[r] + k);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
  for (int r = 0; r < M; ++r) {
    _mm256_storeu_ps(out[r], c0[r]);
    _mm256_storeu_ps(out[r] + 8, c1[r]);
  }
}

MXReturnValue maskedFcForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                              const OpResource&) {
  const float* x = in->at(0).data<float>();
  const float* skip = in->at(1).data<float>();
  const float* w = in->at(2).data<float>();
  const float* b = intAttr(attrs, "no_bias") ? nullptr : in->at(3).data<float>();
  float* y = out->at(0).data<float>();
  const int64_t K = in->at(2).shape[1], O = in->at(2).shape[0], N = in->at(1).shape[0];
  std::vector<int64_t> rows;   // the rows to compute
  rows.reserve(N);
  for (int64_t n = 0; n < N; ++n) {
    if (skip[n] == 0.0f)
      rows.push_back(n);
    else
      for (int64_t o = 0; o < O; ++o) y[n * O + o] = 0.0f;
  }
  const int64_t A = static_cast<int64_t>(rows.size()), panels = (O + kPanel - 1) / kPanel;
  if (A == 0) return MX_SUCCESS;
#pragma omp parallel if (A * O * K >= 64 * kParallelMin)
  {
    static thread_local std::vector<float> buffer;   // kept from call to call
    if (buffer.size() < static_cast<size_t>(K * kPanel + 8 + 2 * kPanel)) buffer.resize(K * kPanel + 8 + 2 * kPanel);
    float* pack = buffer.data() + ((8 - (reinterpret_cast<uintptr_t>(buffer.data()) / sizeof(float)) % 8) % 8);
    float* bias16 = pack + K * kPanel;        // the panel's bias, zero-padded
    float* spill = bias16 + kPanel;           // a last, partial panel's row
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t o = p * kPanel, width = std::min<int64_t>(kPanel, O - o);
      for (int64_t j = 0; j < kPanel; ++j) {  // pack (K,16): column j is weight row o + j
        const float* wj = w + (o + j) * K;
        for (int64_t k = 0; k < K; ++k) pack[k * kPanel + j] = j < width ? wj[k] : 0.0f;
        bias16[j] = b && j < width ? b[o + j] : 0.0f;
      }
      for (int64_t i = 0; i < A; i += kRowBlock) {
        const int m = static_cast<int>(std::min<int64_t>(kRowBlock, A - i));
        float* dst[kRowBlock];
        for (int r = 0; r < m; ++r) dst[r] = width == kPanel ? y + rows[i + r] * O + o : spill;
        if (width < kPanel) {   // one row at a time through the spill row
          for (int r = 0; r < m; ++r) {
            panelRows<1>(x, K, &rows[i + r], pack, b ? bias16 : nullptr, &dst[r]);
            for (int64_t j = 0; j < width; ++j) y[rows[i + r] * O + o + j] = spill[j];
          }
          continue;
        }
        switch (m) {
          case 6: panelRows<6>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
          case 5: panelRows<5>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
          case 4: panelRows<4>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
          case 3: panelRows<3>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
          case 2: panelRows<2>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
          default: panelRows<1>(x, K, &rows[i], pack, b ? bias16 : nullptr, dst); break;
        }
      }
    }
  }
  return MX_SUCCESS;
}
MXReturnValue maskedFcType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_masked_fc", *in, out);
}
MXReturnValue maskedFcShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                            std::vector<std::vector<unsigned int>>* out) {
  const auto& x = in->at(0);
  const auto& skip = in->at(1);
  const auto& w = in->at(2);
  uint64_t rows = 1;
  for (size_t d = 0; d + 1 < x.size(); ++d) rows *= x[d];
  const bool bias_ok = intAttr(attrs, "no_bias") || (in->at(3).size() == 1 && w.size() == 2 && in->at(3)[0] == w[0]);
  if (x.size() < 2 || w.size() != 2 || w[1] != x.back() || skip.size() != 1 || skip[0] != rows || !bias_ok) {
    MX_ERROR_MSG << "nmt_masked_fc: expects x (...,K), skip (N,) with N the rows of x, weight (O,K) and, unless "
                    "no_bias, bias (O,)";
    return MX_FAIL;
  }
  out->at(0) = x;
  out->at(0).back() = w[0];
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_masked_fc, maskedFcForward, maskedFcArity, maskedFcType, maskedFcShape);
#endif   // NMT_HAVE_AVX2

// ---- nmt_add_sumsq ---------------------------------------------------------------------------------------------
MXReturnValue addSumsqArity(const Attrs& attrs, int* num_in, int* num_out) {
  const int n = intAttr(attrs, "num_arrays"), r = intAttr(attrs, "num_replicas");
  if (n < 1 || r < 1) {
    MX_ERROR_MSG << "nmt_add_sumsq: needs num_arrays >= 1 and num_replicas >= 1";
    return MX_FAIL;
  }
  *num_in = n * r;
  *num_out = 1;
  return MX_SUCCESS;
}
MXReturnValue addSumsqMutates(const Attrs& attrs, std::vector<int>* indices) {
  if (intAttr(attrs, "num_replicas") > 1)   // one replica: a sum of squares only, nothing written
    for (int i = 0; i < intAttr(attrs, "num_arrays"); ++i) indices->push_back(i);
  return MX_SUCCESS;
}
// a += b when b is given; returns the sum of squares of the (new) a. Blocks of 4096 values each have a float
// accumulator (vectorized), summed in double.
static double addAndSumsq(float* __restrict__ a, const float* __restrict__ b, int64_t size) {
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (size >= 16 * kParallelMin)
  for (int64_t start = 0; start < size; start += 4096) {
    const int64_t end = start + 4096 < size ? start + 4096 : size;
    float acc = 0.0f;
    if (b) {
#pragma omp simd reduction(+ : acc)
      for (int64_t j = start; j < end; ++j) {
        const float v = a[j] + b[j];
        a[j] = v;
        acc += v * v;
      }
    } else {
#pragma omp simd reduction(+ : acc)
      for (int64_t j = start; j < end; ++j) acc += a[j] * a[j];
    }
    total += acc;
  }
  return total;
}
MXReturnValue addSumsqForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                              const OpResource&) {
  const int n = intAttr(attrs, "num_arrays"), r = intAttr(attrs, "num_replicas");
  double total = 0.0;
  for (int i = 0; i < n; ++i) {
    float* a = in->at(i).data<float>();
    const int64_t size = in->at(i).size();
    for (int k = 1; k < r - 1; ++k) addAndSumsq(a, in->at(k * n + i).data<float>(), size);   // 3+ replicas
    total += addAndSumsq(a, r > 1 ? in->at((r - 1) * n + i).data<float>() : nullptr, size);
  }
  out->at(0).data<float>()[0] = static_cast<float>(total);
  return MX_SUCCESS;
}
MXReturnValue addSumsqType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_add_sumsq", *in, out);
}
// Inputs in groups of n (num_arrays) whose i-th arrays must have one shape; one (1,) output. The error message is
// "<op>: <before><i><after>".
MXReturnValue groupedShapes(const char* op, const char* before, const char* after, const Attrs& attrs,
                            std::vector<std::vector<unsigned int>>* in, std::vector<std::vector<unsigned int>>* out) {
  const int n = intAttr(attrs, "num_arrays");
  for (size_t i = n; i < in->size(); ++i)
    if (in->at(i) != in->at(i % n)) {
      MX_ERROR_MSG << op << ": " << before << i % n << after;
      return MX_FAIL;
    }
  out->at(0) = {1};
  return MX_SUCCESS;
}
MXReturnValue addSumsqShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                            std::vector<std::vector<unsigned int>>* out) {
  return groupedShapes("nmt_add_sumsq", "array ", " has different shapes in different replicas", attrs, in, out);
}
NMT_REGISTER_OP(nmt_add_sumsq, addSumsqForward, addSumsqArity, addSumsqType, addSumsqShape)
    .setMutateInputs(addSumsqMutates);

// ---- nmt_adam --------------------------------------------------------------------------------------------------
MXReturnValue adamArity(const Attrs& attrs, int* num_in, int* num_out) {
  const int n = intAttr(attrs, "num_arrays");
  if (n < 1) {
    MX_ERROR_MSG << "nmt_adam: needs num_arrays >= 1";
    return MX_FAIL;
  }
  *num_in = 4 * n;
  *num_out = 1;
  return MX_SUCCESS;
}
MXReturnValue adamMutates(const Attrs& attrs, std::vector<int>* indices) {
  const int n = intAttr(attrs, "num_arrays");
  for (int i = 0; i < n; ++i) indices->push_back(i);            // weights
  for (int i = 2 * n; i < 4 * n; ++i) indices->push_back(i);    // means and variances
  return MX_SUCCESS;
}
// A float attribute as MXNet's own operators parse theirs (strtof); `fallback` when absent.
static float floatAttr(const Attrs& attrs, const char* name, float fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : std::strtof(it->second.c_str(), nullptr);
}
// The comma-separated floats of attribute `name`.
static std::vector<float> floatList(const Attrs& attrs, const char* name) {
  std::vector<float> out;
  auto it = attrs.find(name);
  if (it == attrs.end()) return out;
  const char* s = it->second.c_str();
  while (*s) {
    char* end;
    out.push_back(std::strtof(s, &end));
    if (end == s) break;
    s = *end == ',' ? end + 1 : end;
  }
  return out;
}
// No contraction into fused multiply-adds: each product and sum rounds as in MXNet's kernel.
__attribute__((optimize("fp-contract=off")))
static void adamArray(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                      float* __restrict__ v, int64_t size, float lr, float wd, float beta1, float beta2, float eps,
                      float rescale, float clip) {
  const float one_minus_beta1 = 1.f - beta1, one_minus_beta2 = 1.f - beta2;
#pragma omp parallel for schedule(static) if (size >= 16 * kParallelMin)
  for (int64_t start = 0; start < size; start += 4096) {
    const int64_t end = start + 4096 < size ? start + 4096 : size;
#pragma omp simd
    for (int64_t j = start; j < end; ++j) {
      float grad = g[j] * rescale + w[j] * wd;
      if (clip >= 0.f) grad = grad > clip ? clip : (grad < -clip ? -clip : grad);
      const float mean = beta1 * m[j] + one_minus_beta1 * grad;
      const float var = beta2 * v[j] + one_minus_beta2 * grad * grad;
      m[j] = mean;
      v[j] = var;
      w[j] = w[j] - lr * mean / (std::sqrt(var) + eps);
    }
  }
}
MXReturnValue adamForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                          const OpResource&) {
  const int n = intAttr(attrs, "num_arrays");
  const std::vector<float> lrs = floatList(attrs, "lrs"), wds = floatList(attrs, "wds");
  if (static_cast<int>(lrs.size()) != n || static_cast<int>(wds.size()) != n) {
    MX_ERROR_MSG << "nmt_adam: lrs and wds need one value per array (" << n << "), got " << lrs.size() << " and "
                 << wds.size();
    return MX_FAIL;
  }
  const float beta1 = floatAttr(attrs, "beta1", 0.9f), beta2 = floatAttr(attrs, "beta2", 0.999f);
  const float eps = floatAttr(attrs, "epsilon", 1e-8f), rescale = floatAttr(attrs, "rescale_grad", 1.f);
  const float clip = floatAttr(attrs, "clip_gradient", -1.f);
  for (int i = 0; i < n; ++i)
    adamArray(in->at(i).data<float>(), in->at(n + i).data<float>(), in->at(2 * n + i).data<float>(),
              in->at(3 * n + i).data<float>(), in->at(i).size(), lrs[i], wds[i], beta1, beta2, eps, rescale, clip);
  out->at(0).data<float>()[0] = 0.f;
  return MX_SUCCESS;
}
MXReturnValue adamType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_adam", *in, out);
}
MXReturnValue adamShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                        std::vector<std::vector<unsigned int>>* out) {
  return groupedShapes("nmt_adam", "the weight, gradient, mean and variance of array ", " differ in shape", attrs, in,
                       out);
}
NMT_REGISTER_OP(nmt_adam, adamForward, adamArity, adamType, adamShape)
    .setMutateInputs(adamMutates);

// ---- nmt_pin_thread ----------------------------------------------------------------------------------------------
// Binds the engine thread that runs it (the worker of its input's CPU context) to the cores listed in "cores"
// (comma-separated ids). Output (1,): 0, or the errno of sched_setaffinity.
MXReturnValue pinForward(const Attrs& attrs, std::vector<MXTensor>*, std::vector<MXTensor>* out, const OpResource&) {
  float status = ENOSYS;   // thread affinity is a Linux call
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  auto it = attrs.find("cores");   // well-formed: pinShape checked it
  const std::string cores = it == attrs.end() ? "" : it->second;
  for (size_t start = 0; start < cores.size();) {
    size_t end = cores.find(',', start);
    if (end == std::string::npos) end = cores.size();
    if (end > start) {
      const int core = std::stoi(cores.substr(start, end - start));
      if (core < CPU_SETSIZE) CPU_SET(core, &set);
    }
    start = end + 1;
  }
  status = sched_setaffinity(0, sizeof(set), &set) == 0 ? 0.0f : static_cast<float>(errno);
#endif
  out->at(0).data<float>()[0] = status;
  return MX_SUCCESS;
}
MXReturnValue pinType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return floatOnly("nmt_pin_thread", *in, out);
}
MXReturnValue pinShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>*,
                       std::vector<std::vector<unsigned int>>* out) {
  auto it = attrs.find("cores");
  if (it == attrs.end() || it->second.empty() ||
      it->second.find_first_not_of("0123456789,") != std::string::npos) {
    MX_ERROR_MSG << "nmt_pin_thread: needs cores, a comma-separated list of core ids";
    return MX_FAIL;
  }
  out->at(0) = {1};
  return MX_SUCCESS;
}
NMT_REGISTER_OP(nmt_pin_thread, pinForward, (arity<1, 1>), pinType, pinShape);

MXReturnValue initialize(int version) {
  if (version >= 10700) return MX_SUCCESS;
  MX_ERROR_MSG << "the nmt operators need MXNet >= 1.7 (this is " << version << ")";
  return MX_FAIL;
}
