#include "actors/protocol/wire_tensor.hpp"

#include <optional>
#include <stdexcept>
#include <string>

namespace corolla {
namespace {

wire::DType to_wire(DType t) {
  switch (t) {
    case DType::f32: return wire::DType::F32;
    case DType::f16: return wire::DType::F16;
    case DType::bf16: return wire::DType::BF16;
    case DType::q8_0: return wire::DType::Q80;
    case DType::q4_0: return wire::DType::Q40;
    case DType::q4_1: return wire::DType::Q41;
    case DType::i32: return wire::DType::I32;
    case DType::i64: return wire::DType::I64;
    case DType::q4_K: return wire::DType::Q4K;
    case DType::q5_K: return wire::DType::Q5K;
    case DType::q6_K: return wire::DType::Q6K;
    case DType::q5_0: return wire::DType::Q50;
    case DType::q5_1: return wire::DType::Q51;
    case DType::q2_K: return wire::DType::Q2K;
    case DType::q3_K: return wire::DType::Q3K;
    case DType::iq4_nl: return wire::DType::IQ4NL;
    case DType::q4_0_r16:
    case DType::q8_0_r16:
    case DType::q4_1_r16:
    case DType::q4_K_r16:
    case DType::q5_K_r16:
    case DType::q6_K_r16:
    case DType::q2_K_r16:
    case DType::q3_K_r16:
    case DType::iq4_nl_r16: break;  // a CPU kernel layout: its plain form is what travels
  }
  throw std::invalid_argument("cannot send a tensor of dtype " + std::string(dtype_name(t)));
}

bool from_wire(wire::DType t, DType& out) {
  switch (t) {
    case wire::DType::F32: out = DType::f32; return true;
    case wire::DType::F16: out = DType::f16; return true;
    case wire::DType::BF16: out = DType::bf16; return true;
    case wire::DType::Q80: out = DType::q8_0; return true;
    case wire::DType::Q40: out = DType::q4_0; return true;
    case wire::DType::Q41: out = DType::q4_1; return true;
    case wire::DType::I32: out = DType::i32; return true;
    case wire::DType::I64: out = DType::i64; return true;
    case wire::DType::Q4K: out = DType::q4_K; return true;
    case wire::DType::Q5K: out = DType::q5_K; return true;
    case wire::DType::Q6K: out = DType::q6_K; return true;
    case wire::DType::Q50: out = DType::q5_0; return true;
    case wire::DType::Q51: out = DType::q5_1; return true;
    case wire::DType::Q2K: out = DType::q2_K; return true;
    case wire::DType::Q3K: out = DType::q3_K; return true;
    case wire::DType::IQ4NL: out = DType::iq4_nl; return true;
  }
  return false;
}

}  // namespace

void write_tensor(wire::Tensor::Builder b, const Tensor& t, capnp::Orphanage orphanage) {
  if (t.device() != Device::cpu) throw std::invalid_argument("cannot send a device tensor; download it first");
  b.setDtype(to_wire(t.dtype()));
  auto shape = b.initShape(static_cast<unsigned>(t.rank()));
  for (int i = 0; i < t.rank(); ++i) shape.set(static_cast<unsigned>(i), t.dim(i));
  // A shape past int64 elements (only a hostile sender builds one: the probes do) goes out as its dimensions alone.
  const std::optional<int64_t> n = t.shape().checked_numel();
  if (!n || *n == 0 || !t.data()) return;
  auto bytes = kj::arrayPtr(static_cast<const kj::byte*>(t.data()), static_cast<size_t>(t.nbytes()));
  b.adoptData(orphanage.referenceExternalData(capnp::Data::Reader(bytes.begin(), bytes.size())));
}

std::string read_tensor(wire::Tensor::Reader r, const std::shared_ptr<const void>& keep_alive, const char* what,
                        Tensor& out) {
  DType dtype;
  if (!from_wire(r.getDtype(), dtype))
    return std::string(what) + ": unknown dtype " + std::to_string(static_cast<int>(r.getDtype()));
  auto dims = r.getShape();
  if (dims.size() > 4) return std::string(what) + ": rank " + std::to_string(dims.size()) + " is above 4";
  int64_t d[4] = {0, 0, 0, 0};
  for (unsigned i = 0; i < dims.size(); ++i) {
    d[i] = dims[i];
    if (d[i] < 0 || d[i] > (int64_t{1} << 32)) return std::string(what) + ": dimension " + std::to_string(d[i]);
  }
  Shape shape;
  switch (dims.size()) {
    case 0: shape = Shape{}; break;
    case 1: shape = Shape{d[0]}; break;
    case 2: shape = Shape{d[0], d[1]}; break;
    case 3: shape = Shape{d[0], d[1], d[2]}; break;
    default: shape = Shape{d[0], d[1], d[2], d[3]}; break;
  }
  // Counted without overflow: [2^32, 2^32, h] must not count as 0 elements that no data is needed for.
  const auto counted = shape.checked_numel();
  if (!counted || *counted > (int64_t{1} << 34))
    return std::string(what) + ": " + shape.str() + " has too many elements";
  const int64_t numel = *counted;
  if (numel % block_elems(dtype) != 0) return std::string(what) + ": elements do not fill whole blocks";
  auto data = r.getData();
  const int64_t need = storage_bytes(dtype, numel);
  if (static_cast<int64_t>(data.size()) != need)
    return std::string(what) + ": " + std::to_string(data.size()) + " bytes do not hold " +
           std::string(dtype_name(dtype)) + shape.str() + " (" + std::to_string(need) + " bytes)";
  out = Tensor::view(const_cast<kj::byte*>(data.begin()), dtype, shape, keep_alive);
  return {};
}

}  // namespace corolla
