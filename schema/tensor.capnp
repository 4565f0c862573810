@0xc3a1e5b2d4f60718;
# A tensor on the wire: written once by the sender, read in place (zero-copy) by the receiver.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("corolla::wire");

enum DType {
  f32 @0;
  f16 @1;
  bf16 @2;
  q80 @3;
  q40 @4;
  q41 @5;
  i32 @6;
  i64 @7;
  q4k @8;   # GGUF's K-quants (weights, as kernels/dtype.hpp lays them out)
  q5k @9;
  q6k @10;
  q50 @11;
  q51 @12;
  q2k @13;
  q3k @14;
  iq4nl @15;
}

struct Tensor {
  dtype @0 :DType;
  shape @1 :List(Int64);
  data @2 :Data;
}
