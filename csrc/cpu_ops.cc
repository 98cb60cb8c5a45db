// Fused, multi-threaded CPU kernels for PaddleBERT's training step (Paddle custom operators).
//
// Paddle's CPU elementwise kernels run on one thread (Eigen's DefaultDevice) while its GEMMs use all of
// them; these kernels do the same arithmetic as a chain of Paddle ops in one or two OpenMP passes.
// docs/cpu-training-profile.md says which share of a step each one takes. Built by cpu_ops.py.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "paddle/extension.h"

// glibc's libmvec (2.35 and later) has vector erff and expf, which math.h declares as such only under
// -ffast-math; declaring them here lets "omp simd" loops call the 8-wide AVX2 versions (cpu_ops.py links
// libmvec). The values are glibc's own erff/expf to within their stated few ulp.
extern "C" {
__attribute__((simd("notinbranch"))) float erff(float) noexcept;
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
}

namespace {

// Below this many elements a second thread costs more than it saves. The thread count is Paddle's
// (paddle.base.core.set_num_threads): cpu_ops.py links this library to Paddle's own OpenMP runtime (Intel's
// libiomp5, which MKL uses too), so there is one thread pool; with GCC's libgomp beside it, the two pools'
// spinning threads fought over the cores and the fused LAMB ran 1.8x slower than Paddle's ops at 2 threads.
constexpr int64_t kMinParallel = 1 << 15;

template <typename T>
T ScalarOf(const paddle::Tensor& t) {
  return t.dtype() == paddle::DataType::FLOAT64 ? static_cast<T>(t.data<double>()[0])
                                                : static_cast<T>(t.data<float>()[0]);
}

// LAMB (You et al. 2020, arXiv:1904.00962, Algorithm 2) for one tensor, as optimizer.Lamb defines it:
//   g = grad_scale * grad                     (the global-norm clip's factor, folded in)
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   a = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),  u = a + wd w
//   w = w - lr r u,  r = ||w|| / ||u|| if wd > 0 and both norms are non-zero, else 1.
// Pass 1 advances the moments and sums ||w||^2, ||a||^2 and <a, w> (in double); pass 2 recomputes a from
// the stored moments (bit for bit the same) and updates w, so no scratch tensor is needed.
template <typename T>
void LambUpdate(T* w, const T* grad, T* m, T* v, int64_t n, T b1, T b2, T eps, double wd, T grad_scale,
                T inv_bias1, T inv_bias2, double lr) {
  const bool parallel = n >= kMinParallel;
  double w_sq = 0.0, a_sq = 0.0, aw = 0.0;
#pragma omp parallel for simd if (parallel) reduction(+ : w_sq, a_sq, aw) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad_scale * grad[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const T a = (mi * inv_bias1) / (std::sqrt(vi * inv_bias2) + eps);
    w_sq += static_cast<double>(w[i]) * w[i];
    a_sq += static_cast<double>(a) * a;
    aw += static_cast<double>(a) * w[i];
  }
  double ratio = 1.0;
  if (wd > 0) {
    const double u_sq = a_sq + 2.0 * wd * aw + wd * wd * w_sq;
    if (w_sq > 0 && u_sq > 0) ratio = std::sqrt(w_sq / u_sq);
  }
  const T step = static_cast<T>(lr * ratio);
  const T decay = static_cast<T>(wd);
#pragma omp parallel for simd if (parallel) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T a = (m[i] * inv_bias1) / (std::sqrt(v[i] * inv_bias2) + eps);
    w[i] -= step * (a + decay * w[i]);
  }
}

std::vector<paddle::Tensor> LambForward(const paddle::Tensor& param, const paddle::Tensor& grad,
                                        const paddle::Tensor& moment1, const paddle::Tensor& moment2,
                                        const paddle::Tensor& beta1_pow, const paddle::Tensor& beta2_pow,
                                        const paddle::Tensor& learning_rate, double beta1, double beta2,
                                        double epsilon, double weight_decay, double grad_scale) {
  PD_CHECK(param.is_cpu() && grad.is_cpu(), "paddlebert_lamb: CPU tensors only");
  PD_CHECK(param.numel() == grad.numel() && param.numel() == moment1.numel() && param.numel() == moment2.numel(),
           "paddlebert_lamb: parameter, gradient and moments differ in size");
  PD_CHECK(grad.dtype() == param.dtype() && moment1.dtype() == param.dtype() && moment2.dtype() == param.dtype(),
           "paddlebert_lamb: parameter, gradient and moments differ in dtype");
  PD_DISPATCH_FLOATING_TYPES(param.type(), "paddlebert_lamb", ([&] {
    const data_t bias1 = data_t(1) - ScalarOf<data_t>(beta1_pow);
    const data_t bias2 = data_t(1) - ScalarOf<data_t>(beta2_pow);
    LambUpdate<data_t>(const_cast<data_t*>(param.data<data_t>()), grad.data<data_t>(),
                       const_cast<data_t*>(moment1.data<data_t>()), const_cast<data_t*>(moment2.data<data_t>()),
                       param.numel(), static_cast<data_t>(beta1), static_cast<data_t>(beta2),
                       static_cast<data_t>(epsilon), weight_decay, static_cast<data_t>(grad_scale),
                       data_t(1) / bias1, data_t(1) / bias2, ScalarOf<double>(learning_rate));
  }));
  return {};  // all outputs are the inputs, updated in place
}

// GELU, erf form (Hendrycks & Gimpel 2016, arXiv:1606.08415): gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
// written as Paddle's gelu kernel writes it; its derivative is Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

std::vector<paddle::Tensor> GeluForward(const paddle::Tensor& x) {
  PD_CHECK(x.is_cpu() && x.dtype() == paddle::DataType::FLOAT32, "paddlebert_gelu: float32 CPU tensors only");
  paddle::Tensor out = paddle::empty_like(x);
  const float* in = x.data<float>();
  float* result = out.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n >= kMinParallel) schedule(static)
  for (int64_t i = 0; i < n; ++i) result[i] = 0.5f * in[i] * (1.0f + erff(in[i] * kSqrtHalf));
  return {out};
}

std::vector<paddle::Tensor> GeluBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out) {
  PD_CHECK(grad_out.dtype() == paddle::DataType::FLOAT32 && grad_out.numel() == x.numel(),
           "paddlebert_gelu_grad: the gradient must be float32 and of the input's size");
  paddle::Tensor grad_x = paddle::empty_like(x);
  const float* in = x.data<float>();
  const float* dy = grad_out.data<float>();
  float* dx = grad_x.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n >= kMinParallel) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + erff(in[i] * kSqrtHalf));
    dx[i] = dy[i] * (cdf + in[i] * kInvSqrt2Pi * expf(-0.5f * in[i] * in[i]));
  }
  return {grad_x};
}

// LayerNorm over the last axis (Ba et al. 2016, arXiv:1607.06450): y = (x - mean) rstd w + b, one row of H
// per iteration (a row stays in cache between its passes). The gradient, with n = (x - mean) rstd and
// g = dy w, is dx = rstd (g - mean(g) - n mean(g n)); dw and db are column sums of dy n and dy, summed per
// thread and then across threads.
// Each row's statistics and sums are kept in double, and the mean and rstd saved for the gradient are double.
// In float, a row with a small spread loses its digits: with rstd ~ 1e3, the float mean's rounding (~6e-8)
// shifts every n by ~6e-5, and dx = rstd (...) carries that shift times rstd again. In double the kernel is
// within a few float ulps of the exact result (tests/test_cpu_kernels.py checks it against float64).
std::vector<paddle::Tensor> LayerNormForward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                             const paddle::Tensor& bias, float epsilon) {
  PD_CHECK(x.is_cpu() && x.dtype() == paddle::DataType::FLOAT32 && weight.dtype() == paddle::DataType::FLOAT32 &&
               bias.dtype() == paddle::DataType::FLOAT32,
           "paddlebert_layer_norm: float32 CPU tensors only");
  const int64_t width = weight.numel(), rows = x.numel() / width;
  PD_CHECK(bias.numel() == width && rows * width == x.numel(), "paddlebert_layer_norm: x's last axis is not H");
  paddle::Tensor out = paddle::empty_like(x);
  paddle::Tensor mean = paddle::empty({rows}, paddle::DataType::FLOAT64, paddle::CPUPlace());
  paddle::Tensor rstd = paddle::empty({rows}, paddle::DataType::FLOAT64, paddle::CPUPlace());
  const float *in = x.data<float>(), *w = weight.data<float>(), *b = bias.data<float>();
  float* y = out.data<float>();
  double *row_mean = mean.data<double>(), *row_rstd = rstd.data<double>();
#pragma omp parallel for if (x.numel() >= kMinParallel) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = in + r * width;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < width; ++j) sum += xr[j];
    const double mu = sum / width;
    double square_sum = 0.0;
#pragma omp simd reduction(+ : square_sum)
    for (int64_t j = 0; j < width; ++j) square_sum += (xr[j] - mu) * (xr[j] - mu);
    const double inv_std = 1.0 / std::sqrt(square_sum / width + epsilon);
    float* yr = y + r * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) yr[j] = static_cast<float>((xr[j] - mu) * inv_std * w[j] + b[j]);
    row_mean[r] = mu;
    row_rstd[r] = inv_std;
  }
  return {out, mean, rstd};
}

std::vector<paddle::Tensor> LayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                              const paddle::Tensor& mean, const paddle::Tensor& rstd,
                                              const paddle::Tensor& grad_out) {
  const int64_t width = weight.numel(), rows = x.numel() / width;
  paddle::Tensor grad_x = paddle::empty_like(x);
  paddle::Tensor grad_weight = paddle::empty_like(weight);
  paddle::Tensor grad_bias = paddle::empty_like(weight);
  const float *in = x.data<float>(), *w = weight.data<float>(), *dy = grad_out.data<float>();
  const double *row_mean = mean.data<double>(), *row_rstd = rstd.data<double>();
  float *dx = grad_x.data<float>(), *dw = grad_weight.data<float>(), *db = grad_bias.data<float>();
  const bool parallel = x.numel() >= kMinParallel;
  const int threads = parallel ? omp_get_max_threads() : 1;
  std::vector<double> partial(static_cast<size_t>(threads) * 2 * width, 0.0);  // per thread: dw, db
#pragma omp parallel if (parallel) num_threads(threads)
  {
    double* my_dw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * width;
    double* my_db = my_dw + width;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = in + r * width, *dyr = dy + r * width;
      const double mu = row_mean[r], inv_std = row_rstd[r];
      double sum_g = 0.0, sum_gn = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gn)
      for (int64_t j = 0; j < width; ++j) {
        const double n = (xr[j] - mu) * inv_std, g = static_cast<double>(dyr[j]) * w[j];
        sum_g += g;
        sum_gn += g * n;
        my_dw[j] += dyr[j] * n;
        my_db[j] += dyr[j];
      }
      const double mean_g = sum_g / width, mean_gn = sum_gn / width;
      float* dxr = dx + r * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        const double n = (xr[j] - mu) * inv_std;
        dxr[j] = static_cast<float>(inv_std * (static_cast<double>(dyr[j]) * w[j] - mean_g - n * mean_gn));
      }
    }
  }
  for (int64_t j = 0; j < width; ++j) {
    double sum_w = 0.0, sum_b = 0.0;
    for (int t = 0; t < threads; ++t) {
      sum_w += partial[static_cast<size_t>(t) * 2 * width + j];
      sum_b += partial[static_cast<size_t>(t) * 2 * width + width + j];
    }
    dw[j] = static_cast<float>(sum_w);
    db[j] = static_cast<float>(sum_b);
  }
  return {grad_x, grad_weight, grad_bias};
}

std::vector<std::vector<int64_t>> LayerNormShapes(const std::vector<int64_t>& x, const std::vector<int64_t>& weight,
                                                  const std::vector<int64_t>& bias) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
  return {x, {rows}, {rows}};
}

std::vector<paddle::DataType> LayerNormDtypes(const paddle::DataType& x, const paddle::DataType& weight,
                                              const paddle::DataType& bias) {
  return {x, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64};
}


// Softmax cross-entropy of the masked-LM head, one row of V logits per iteration: loss_r = lse_r - x_r[label_r],
// lse_r = max_r + log(sum_j exp(x_rj - max_r)). A row whose label is kIgnoreLabel has loss 0 and a zero gradient. The gradient, d loss_r / d x_rj = softmax(x_r)_j - [j == label_r],
// is computed from the saved lse in the backward pass, so no [rows x V] softmax is kept between the two passes
// (Paddle's softmax_with_cross_entropy keeps one, and runs on one thread).
constexpr int64_t kIgnoreLabel = -1;
constexpr int64_t kXentBlock = 2048;  // logits per block of the forward pass: 8 KiB, well inside L1

std::vector<paddle::Tensor> MaskedLmXentForward(const paddle::Tensor& logits, const paddle::Tensor& labels) {
  PD_CHECK(logits.is_cpu() && logits.dtype() == paddle::DataType::FLOAT32 && logits.shape().size() == 2,
           "paddlebert_masked_lm_xent: logits must be a float32 CPU tensor [rows, V]");
  const int64_t rows = logits.shape()[0], width = logits.shape()[1];
  PD_CHECK(labels.dtype() == paddle::DataType::INT64 && labels.numel() == rows,
           "paddlebert_masked_lm_xent: labels must be int64 [rows]");
  paddle::Tensor loss = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  paddle::Tensor lse = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* x = logits.data<float>();
  const int64_t* label = labels.data<int64_t>();
  float *row_loss = loss.data<float>(), *row_lse = lse.data<float>();
  int64_t bad_label = -2;
#pragma omp parallel for if (logits.numel() >= kMinParallel) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    // One pass over the row from memory: block by block (each block stays in L1 between its max and its sum), the
    // running sum rescaled whenever the running max grows.
    float top = -INFINITY, sum = 0.0f;
    for (int64_t begin = 0; begin < width; begin += kXentBlock) {
      const int64_t end = std::min(width, begin + kXentBlock);
      float block_top = top;
#pragma omp simd reduction(max : block_top)
      for (int64_t j = begin; j < end; ++j) block_top = std::max(block_top, xr[j]);
      float block_sum = 0.0f;
#pragma omp simd reduction(+ : block_sum)
      for (int64_t j = begin; j < end; ++j) block_sum += expf(xr[j] - block_top);
      sum = sum * expf(top - block_top) + block_sum;
      top = block_top;
    }
    const float log_sum = top + std::log(sum);
    row_lse[r] = log_sum;
    const int64_t target = label[r];
    if (target == kIgnoreLabel) {
      row_loss[r] = 0.0f;
    } else if (target < 0 || target >= width) {
#pragma omp critical
      bad_label = target;
      row_loss[r] = 0.0f;
    } else {
      row_loss[r] = log_sum - xr[target];
    }
  }
  PD_CHECK(bad_label == -2, "paddlebert_masked_lm_xent: label ", bad_label, " is outside [0, ", width,
           ") and is not the ignored label -1");
  return {loss, lse};
}

std::vector<paddle::Tensor> MaskedLmXentBackward(const paddle::Tensor& logits, const paddle::Tensor& labels,
                                                 const paddle::Tensor& lse, const paddle::Tensor& grad_loss) {
  PD_CHECK(grad_loss.dtype() == paddle::DataType::FLOAT32 && grad_loss.numel() == labels.numel(),
           "paddlebert_masked_lm_xent_grad: the loss gradient must be float32 [rows]");
  const int64_t rows = logits.shape()[0], width = logits.shape()[1];
  paddle::Tensor grad_logits = paddle::empty_like(logits);
  const float *x = logits.data<float>(), *row_lse = lse.data<float>(), *dloss = grad_loss.data<float>();
  const int64_t* label = labels.data<int64_t>();
  float* dx = grad_logits.data<float>();
#pragma omp parallel for if (logits.numel() >= kMinParallel) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* dxr = dx + r * width;
    const int64_t target = label[r];
    const float scale = target == kIgnoreLabel ? 0.0f : dloss[r], log_sum = row_lse[r];
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) dxr[j] = scale * expf(xr[j] - log_sum);
    if (target != kIgnoreLabel) dxr[target] -= scale;
  }
  return {grad_logits};
}

std::vector<std::vector<int64_t>> MaskedLmXentShapes(const std::vector<int64_t>& logits,
                                                     const std::vector<int64_t>& labels) {
  return {{logits[0]}, {logits[0]}};
}

std::vector<paddle::DataType> MaskedLmXentDtypes(const paddle::DataType& logits, const paddle::DataType& labels) {
  return {paddle::DataType::FLOAT32, paddle::DataType::FLOAT32};
}

}  // namespace

PD_BUILD_OP(paddlebert_layer_norm)
    .Inputs({"X", "Weight", "Bias"})
    .Outputs({"Out", "Mean", "Rstd"})
    .Attrs({"epsilon: float"})
    .SetKernelFn(PD_KERNEL(LayerNormForward))
    .SetInferShapeFn(PD_INFER_SHAPE(LayerNormShapes))
    .SetInferDtypeFn(PD_INFER_DTYPE(LayerNormDtypes));

PD_BUILD_GRAD_OP(paddlebert_layer_norm)
    .Inputs({"X", "Weight", "Mean", "Rstd", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Weight"), paddle::Grad("Bias")})
    .SetKernelFn(PD_KERNEL(LayerNormBackward));

PD_BUILD_OP(paddlebert_gelu).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(GeluForward));

PD_BUILD_GRAD_OP(paddlebert_gelu)
    .Inputs({"X", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .SetKernelFn(PD_KERNEL(GeluBackward));

PD_BUILD_OP(paddlebert_lamb)
    .Inputs({"Param", "Grad", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow", "LearningRate"})
    .Outputs({"ParamOut", "Moment1Out", "Moment2Out"})
    .Attrs({"beta1: double", "beta2: double", "epsilon: double", "weight_decay: double", "grad_scale: double"})
    .SetInplaceMap({{"Param", "ParamOut"}, {"Moment1", "Moment1Out"}, {"Moment2", "Moment2Out"}})
    .SetKernelFn(PD_KERNEL(LambForward));

PD_BUILD_OP(paddlebert_masked_lm_xent)
    .Inputs({"Logits", "Labels"})
    .Outputs({"Loss", "LogSumExp"})
    .SetKernelFn(PD_KERNEL(MaskedLmXentForward))
    .SetInferShapeFn(PD_INFER_SHAPE(MaskedLmXentShapes))
    .SetInferDtypeFn(PD_INFER_DTYPE(MaskedLmXentDtypes));

PD_BUILD_GRAD_OP(paddlebert_masked_lm_xent)
    .Inputs({"Logits", "Labels", "LogSumExp", paddle::Grad("Loss")})
    .Outputs({paddle::Grad("Logits")})
    .SetKernelFn(PD_KERNEL(MaskedLmXentBackward));
