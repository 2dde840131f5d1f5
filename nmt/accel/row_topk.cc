// nmt.accel's CPU kernel, loaded into MXNet as an operator library (lib_api.h); see nmt/accel/__init__.py.
//
//   nmt_row_topk(x (N,V), k) -> values (N,k), indices (N,k) as float32
//       the k largest of each row, best first: the values and ids of MXNet's CPU topk (ret_typ="both"), equal
//       values in the same order, see topkRow. MXNet copies the whole input, writes an id for every value and
//       partially sorts every row's ids through them; this makes one pass over each row that skips each 32-value
//       chunk none of whose values beats the current k-th best, and sorts only the few ids that do.
// Forward only, CPU only, float32 only.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"
#ifdef _OPENMP
#include <omp.h>
#endif

using namespace mxnet::ext;
using Attrs = std::unordered_map<std::string, std::string>;

// Work (elements) from which the rows are split over OpenMP's threads (OMP_NUM_THREADS, as MXNet's own CPU
// operators); below it fork and join cost more than they save.
constexpr int64_t kParallelMin = 8 * 16384;
constexpr int64_t kChunk = 32;

// k from the attributes; 0 when absent or not a number (shape inference then rejects it).
static int kAttr(const Attrs& attrs) {
  auto it = attrs.find("k");
  if (it == attrs.end()) return 0;
  try {
    return std::stoi(it->second);
  } catch (...) {
    return 0;
  }
}

// Offers value s to the sorted k largest values so far, best[0..filled): after it, best[k-1] is the k-th largest
// value seen (whatever the order of equal values), the value at the top of the heap of MXNet's partial sort.
static inline void offer(float s, int k, int& filled, float* best) {
  if (filled == k && !(s > best[k - 1])) return;
  int p = filled < k ? filled++ : k - 1;
  for (; p > 0 && s > best[p - 1]; --p) best[p] = best[p - 1];
  best[p] = s;
}

// The k best of one row into values/indices, the very ids MXNet's CPU topk returns, equal values included. MXNet
// runs std::partial_sort (k * 8 <= V; else std::sort) over all the row's ids with `row[a] > row[b]`: a heap of the
// first k ids, then each later id that is strictly greater than the heap's top (the k-th largest value so far)
// replaces it; every other id leaves the heap as it was. So the same partial sort over only the first k ids and
// the replacing ones (`cand`, found by one pass that skips each 32-value chunk with no value above the k-th
// largest) moves the heap the same way and leaves the same ids in the same order, for a fraction of the work.
static void topkRow(const float* __restrict__ row, int64_t V, int k, float* best, int64_t* cand, float* values,
                    float* indices) {
  auto greater = [row](int64_t a, int64_t b) { return row[a] > row[b]; };
  int64_t m = 0;
  if (static_cast<int64_t>(k) * 8 > V) {
    for (; m < V; ++m) cand[m] = m;
    std::sort(cand, cand + V, greater);
  } else {
    int filled = 0;
    int64_t v = 0;
    for (; v < k; ++v) {
      cand[m++] = v;
      offer(row[v], k, filled, best);
    }
    auto visit = [&](int64_t j) {
      if (row[j] > best[k - 1]) {
        cand[m++] = j;
        offer(row[j], k, filled, best);
      }
    };
    for (; v + kChunk <= V; v += kChunk) {
      const float t = best[k - 1];
      int any = 0;   // an OR of comparisons (vectorized), not a max (which NaN semantics keep scalar)
      for (int64_t j = 0; j < kChunk; ++j) any |= row[v + j] > t;
      if (any)
        for (int64_t j = v; j < v + kChunk; ++j) visit(j);
    }
    for (; v < V; ++v) visit(v);
    std::partial_sort(cand, cand + k, cand + m, greater);
  }
  for (int j = 0; j < k; ++j) {
    values[j] = row[cand[j]];
    indices[j] = static_cast<float>(cand[j]);
  }
}

MXReturnValue topkForward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                          const OpResource&) {
  const float* x = in->at(0).data<float>();
  float* values = out->at(0).data<float>();
  float* indices = out->at(1).data<float>();
  const int64_t N = in->at(0).shape[0], V = in->at(0).shape[1];
  const int k = kAttr(attrs);
#pragma omp parallel if (N * V >= kParallelMin)
  {
    std::vector<float> best(k);
    std::vector<int64_t> cand(V);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      topkRow(x + n * V, V, k, best.data(), cand.data(), values + n * k, indices + n * k);
  }
  return MX_SUCCESS;
}

// Gluon's CachedOp builds a backward graph for every operator it holds, so the operator names one; it fails if run.
MXReturnValue noBackward(const Attrs&, std::vector<MXTensor>*, std::vector<MXTensor>*, const OpResource&) {
  MX_ERROR_MSG << "nmt_row_topk has no backward";
  return MX_FAIL;
}

MXReturnValue topkParse(const Attrs&, int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 2;
  return MX_SUCCESS;
}

MXReturnValue topkType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  if (in->at(0) != kFloat32) {
    MX_ERROR_MSG << "nmt_row_topk: float32 input only";
    return MX_FAIL;
  }
  out->at(0) = kFloat32;
  out->at(1) = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue topkShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                        std::vector<std::vector<unsigned int>>* out) {
  const int k = kAttr(attrs);
  const auto& x = in->at(0);
  if (x.size() != 2 || k < 1 || static_cast<unsigned>(k) > x[1]) {
    MX_ERROR_MSG << "nmt_row_topk: expects an (N,V) input and 1 <= k <= V";
    return MX_FAIL;
  }
  out->at(0) = {x[0], static_cast<unsigned>(k)};
  out->at(1) = {x[0], static_cast<unsigned>(k)};
  return MX_SUCCESS;
}

REGISTER_OP(nmt_row_topk)
    .setForward(topkForward, "cpu")
    .setBackward(noBackward, "cpu")
    .setParseAttrs(topkParse)
    .setInferType(topkType)
    .setInferShape(topkShape);

MXReturnValue initialize(int version) {
  if (version >= 10700) return MX_SUCCESS;
  MX_ERROR_MSG << "nmt_row_topk needs MXNet >= 1.7 (found " << version << ")";
  return MX_FAIL;
}
