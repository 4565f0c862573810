#include "model/train/prompt_tuning.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/weights/safetensors_file.hpp"

namespace corolla {
namespace {

// Rows of logits computed at once: the vocabulary can be large, the rows many.
constexpr int64_t kLogitElementsPerChunk = int64_t{16} << 20;

void zero(Tensor& t) { std::memset(t.data(), 0, static_cast<size_t>(t.nbytes())); }

// `src` (host or device) copied into the host tensor `dst` of the same size.
void copy_into(Backend& backend, const Tensor& src, Tensor& dst) {
  const Tensor host = backend.download(src);
  if (host.data() != dst.data()) std::memcpy(dst.data(), host.data(), static_cast<size_t>(dst.nbytes()));
}

}  // namespace

std::optional<TuningMode> parse_tuning_mode(std::string_view name) {
  if (name == "ptune") return TuningMode::ptune;
  if (name == "deep_ptune") return TuningMode::deep_ptune;
  return std::nullopt;
}

std::string_view tuning_mode_name(TuningMode mode) { return mode == TuningMode::ptune ? "ptune" : "deep_ptune"; }

PromptTuning::PromptTuning(std::shared_ptr<const ClientHead> head, TuningOptions options)
    : head_(std::move(head)), options_(options), adam_(options.adam) {
  const ModelConfig& c = head_->config();
  const int64_t p = options_.pre_seq_len, d = c.hidden_size;
  if (p < 1 || p > c.max_position / 2)
    throw std::invalid_argument("pre_seq_len " + std::to_string(p) + " is outside 1.." +
                                std::to_string(c.max_position / 2));
  if (options_.head == TrainingHead::classifier && options_.num_labels < 2)
    throw std::invalid_argument("a classifier needs at least 2 labels, got " + std::to_string(options_.num_labels));
  std::mt19937_64 rng(options_.seed);
  auto add = [&](const std::string& name, Tensor value) {
    params_.push_back({name, value, Tensor::empty(DType::f32, value.shape())});
  };
  // Prompts start as the embeddings of random vocabulary tokens: the scale of real inputs.
  std::vector<int32_t> ids(static_cast<size_t>(p));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  for (auto& id : ids) id = token(rng);
  add("prompts", head_->backend().download(head_->embed(ids, 1)).reshaped({p, d}).clone());
  if (options_.mode == TuningMode::deep_ptune) add("deep_prompts", Tensor::empty(DType::f32, {c.num_layers, p, d}));
  if (options_.head == TrainingHead::classifier) {
    Tensor score = Tensor::empty(DType::f32, {options_.num_labels, d});
    std::normal_distribution<float> normal(0.f, 1.f / std::sqrt(static_cast<float>(d)));
    for (int64_t i = 0; i < score.numel(); ++i) score.data_as<float>()[i] = normal(rng);
    add("score", score);
  } else if (options_.train_lm_head) {
    add("lm_head", head_->backend().download(head_->lm_head_weight()).to_f32());
  }
  for (auto& prm : params_) adam_.add(prm.value, prm.grad);
}

PromptTuning::Param* PromptTuning::find(const std::string& name) {
  for (auto& prm : params_)
    if (prm.name == name) return &prm;
  return nullptr;
}

const Tensor& PromptTuning::head_weight() const {
  for (const auto& prm : params_)
    if (prm.name == "score" || prm.name == "lm_head") return prm.value;
  return head_->lm_head_weight();
}

BlockInputs PromptTuning::inputs(const TrainingBatch& batch) const {
  const ModelConfig& c = head_->config();
  const int64_t b = batch.batch, t = batch.length, p = options_.pre_seq_len, d = c.hidden_size, s = p + t;
  if (b < 1 || t < 1 || static_cast<int64_t>(batch.ids.size()) != b * t)
    throw std::invalid_argument("the training batch is empty or its ids do not fill [batch, length]");
  if (s > c.max_position)
    throw std::invalid_argument(std::to_string(p) + " prompts plus " + std::to_string(t) +
                                " tokens exceed the model's context of " + std::to_string(c.max_position));
  if (options_.head == TrainingHead::classifier) {
    if (static_cast<int64_t>(batch.labels.size()) != b)
      throw std::invalid_argument("the classifier needs a label for every example");
    for (int32_t label : batch.labels)
      if (label < 0 || label >= options_.num_labels)
        throw std::invalid_argument("label " + std::to_string(label) + " is outside 0.." +
                                    std::to_string(options_.num_labels - 1));
  }
  const Tensor embeds = head_->backend().download(head_->embed(batch.ids, b));
  BlockInputs in;
  in.hidden = Tensor::empty(DType::f32, {b, s, d});
  const float* prompts = params_[0].value.data_as<const float>();
  for (int64_t i = 0; i < b; ++i) {
    float* dst = in.hidden.data_as<float>() + i * s * d;
    std::memcpy(dst, prompts, static_cast<size_t>(p * d) * 4);
    std::memcpy(dst + p * d, embeds.data_as<const float>() + i * t * d, static_cast<size_t>(t * d) * 4);
  }
  in.positions.resize(static_cast<size_t>(b * s));
  for (size_t i = 0; i < in.positions.size(); ++i) in.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(s));
  if (options_.mode == TuningMode::deep_ptune) {
    const Tensor& deep = params_[1].value;  // [L, P, D], shared by the batch
    const int64_t l = deep.dim(0);
    in.prompts = Tensor::empty(DType::f32, {l, b, p, d});
    for (int64_t li = 0; li < l; ++li)
      for (int64_t i = 0; i < b; ++i)
        std::memcpy(in.prompts.data_as<float>() + (li * b + i) * p * d, deep.data_as<const float>() + li * p * d,
                    static_cast<size_t>(p * d) * 4);
  }
  return in;
}

HeadLoss PromptTuning::loss(const TrainingBatch& batch, const Tensor& blocks_out) {
  const ModelConfig& c = head_->config();
  Backend& be = head_->backend();
  const int64_t b = batch.batch, t = batch.length, p = options_.pre_seq_len, d = c.hidden_size, s = p + t;
  if (blocks_out.dtype() != DType::f32 || blocks_out.shape() != Shape{b, s, d})
    throw std::invalid_argument("the blocks' output " + blocks_out.describe() + " is not [" + std::to_string(b) + ", " +
                                std::to_string(s) + ", " + std::to_string(d) + "]");
  // The rows the loss reads, and the class (or next token) each must predict.
  std::vector<int64_t> rows;
  std::vector<int32_t> targets;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = batch.lengths[static_cast<size_t>(i)];
    if (options_.head == TrainingHead::classifier) {
      rows.push_back(i * s + p + len - 1);
      targets.push_back(batch.labels[static_cast<size_t>(i)]);
    } else {
      for (int64_t j = 0; j + 1 < len; ++j) {
        rows.push_back(i * s + p + j);
        targets.push_back(batch.ids[static_cast<size_t>(i * t + j + 1)]);
      }
    }
  }
  if (rows.empty()) throw std::invalid_argument("the LM loss needs sequences of at least 2 tokens");
  const int64_t r = static_cast<int64_t>(rows.size());
  const Tensor out = be.download(blocks_out);
  Tensor h = Tensor::empty(DType::f32, {r, d});
  for (int64_t i = 0; i < r; ++i)
    std::memcpy(h.data_as<float>() + i * d, out.data_as<const float>() + rows[static_cast<size_t>(i)] * d,
                static_cast<size_t>(d) * 4);

  const Tensor hd = be.upload(h);
  Tensor n = be.alloc(DType::f32, {r, d});
  head_->final_norm(hd, n);
  const Tensor w = be.upload(head_weight());
  const int64_t classes = w.dim(0);
  Param* trained = find(options_.head == TrainingHead::classifier ? "score" : "lm_head");
  Tensor head_grad;
  if (trained) head_grad = be.upload(trained->grad);
  Tensor dn = be.alloc(DType::f32, {r, d});
  double total = 0;
  const int64_t chunk = std::max<int64_t>(1, kLogitElementsPerChunk / classes);
  for (int64_t r0 = 0; r0 < r; r0 += chunk) {
    const int64_t rows_here = std::min(chunk, r - r0);
    const Tensor n_part = n.slice_rows(r0, r0 + rows_here);
    Tensor logits = be.alloc(DType::f32, {rows_here, classes});
    be.matmul(n_part, w, nullptr, logits);
    Tensor host = be.download(logits);
    // Cross-entropy and its gradient in place: (softmax − one-hot) / r; an LM head's logits through the model's
    // final soft cap (Gemma 2), and the gradient back through it.
    std::vector<float> cap_grad(static_cast<size_t>(classes));
    for (int64_t i = 0; i < rows_here; ++i) {
      float* row = host.data_as<float>() + i * classes;
      const bool capped = options_.head != TrainingHead::classifier;
      if (capped) head_->cap_logits(row, classes, cap_grad.data());
      const int32_t target = targets[static_cast<size_t>(r0 + i)];
      const float mx = *std::max_element(row, row + classes);
      double sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
      const double lse = mx + std::log(sum);
      total += lse - row[target];
      for (int64_t j = 0; j < classes; ++j)
        row[j] = static_cast<float>(std::exp(static_cast<double>(row[j]) - lse) / static_cast<double>(r));
      row[target] -= 1.f / static_cast<float>(r);
      if (capped)
        for (int64_t j = 0; j < classes; ++j) row[j] *= cap_grad[static_cast<size_t>(j)];
    }
    const Tensor dlogits = be.upload(host);
    Tensor dn_part = dn.slice_rows(r0, r0 + rows_here);
    be.matmul_backward(dlogits, w, dn_part);
    if (trained) be.matmul_weight_grad(dlogits, n_part, head_grad);
  }
  if (trained) copy_into(be, head_grad, trained->grad);
  Tensor dh = be.alloc(DType::f32, {r, d});
  head_->final_norm_backward(hd, dn, dh);
  const Tensor dh_host = be.download(dh);

  HeadLoss result;
  result.loss = total / static_cast<double>(r);
  result.grad = Tensor::empty(DType::f32, {b, s, d});
  for (int64_t i = 0; i < r; ++i)
    std::memcpy(result.grad.data_as<float>() + rows[static_cast<size_t>(i)] * d, dh_host.data_as<const float>() + i * d,
                static_cast<size_t>(d) * 4);
  return result;
}

void PromptTuning::accumulate(const TrainingBatch& batch, const Tensor& grad_in, const Tensor& grad_prompts) {
  const int64_t b = batch.batch, p = options_.pre_seq_len, d = head_->config().hidden_size, s = p + batch.length;
  if (grad_in.dtype() != DType::f32 || grad_in.shape() != Shape{b, s, d})
    throw std::invalid_argument("the input gradient " + grad_in.describe() + " does not match the batch");
  float* gp = params_[0].grad.data_as<float>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < p * d; ++j) gp[j] += grad_in.data_as<const float>()[i * s * d + j];
  if (options_.mode != TuningMode::deep_ptune) return;
  Tensor& deep = params_[1].grad;
  const int64_t l = deep.dim(0);
  if (grad_prompts.dtype() != DType::f32 || grad_prompts.shape() != Shape{l, b, p, d})
    throw std::invalid_argument("the prompt gradient " + grad_prompts.describe() + " does not match [" +
                                std::to_string(l) + ", " + std::to_string(b) + ", " + std::to_string(p) + ", " +
                                std::to_string(d) + "]");
  for (int64_t li = 0; li < l; ++li)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < p * d; ++j)
        deep.data_as<float>()[li * p * d + j] += grad_prompts.data_as<const float>()[(li * b + i) * p * d + j];
}

void PromptTuning::apply() {
  adam_.step();
  for (auto& prm : params_) zero(prm.grad);
}

std::vector<std::pair<std::string, Tensor>> PromptTuning::parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& prm : params_) out.emplace_back(prm.name, prm.value);
  return out;
}

std::vector<std::pair<std::string, Tensor>> PromptTuning::gradients() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& prm : params_) out.emplace_back(prm.name, prm.grad);
  return out;
}

void PromptTuning::set_parameters(const std::map<std::string, Tensor>& values) {
  for (const auto& [name, value] : values) {
    Param* prm = find(name);
    if (!prm) throw std::invalid_argument("no trainable parameter '" + name + "' in this tuning");
    if (value.shape() != prm->value.shape())
      throw std::invalid_argument("parameter '" + name + "' is " + prm->value.describe() + ", got " + value.describe());
    const Tensor f = value.to_f32();
    std::memcpy(prm->value.data(), f.data(), static_cast<size_t>(f.nbytes()));
  }
}

void PromptTuning::save(const std::string& path) const { write_safetensors(path, parameters()); }

TunedPrompts load_tuned_prompts(const std::string& path, const ModelConfig& config) {
  auto file = SafetensorsFile::open(path);
  if (!file->find("prompts")) throw std::invalid_argument(path + ": no tensor 'prompts' (not a prompt-tuning file?)");
  TunedPrompts out;
  out.prompts = file->tensor("prompts").to_f32();
  if (out.prompts.rank() != 2 || out.prompts.dim(1) != config.hidden_size || out.prompts.dim(0) < 1)
    throw std::invalid_argument(path + ": prompts " + out.prompts.describe() + " are not [length, " +
                                std::to_string(config.hidden_size) + "] for this model");
  if (file->find("deep_prompts")) {
    out.deep_prompts = file->tensor("deep_prompts").to_f32();
    if (out.deep_prompts.shape() != Shape{config.num_layers, out.prompts.dim(0), config.hidden_size})
      throw std::invalid_argument(path + ": deep_prompts " + out.deep_prompts.describe() + " are not [" +
                                  std::to_string(config.num_layers) + ", " + std::to_string(out.prompts.dim(0)) + ", " +
                                  std::to_string(config.hidden_size) + "] for this model");
  }
  return out;
}

}  // namespace corolla
