#include "actors/protocol/messages.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include "actors/protocol/wire_tensor.hpp"
#include "schema/server.capnp.h"

namespace corolla {
namespace {

// Builds a message of root type W and writes it, segment table included, into one byte vector.
template <class W, class Fill>
std::vector<char> build(Fill fill) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<W>(), mb.getOrphanage());
  const size_t words = capnp::computeSerializedSizeInWords(mb);
  std::vector<char> out(words * sizeof(capnp::word));
  kj::ArrayOutputStream os(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.data()), out.size()));
  capnp::writeMessage(os, mb);
  return out;
}

// Reads a message of root type W in place; problems land in `wire_error`, never in an exception.
template <class W, class Read>
void parse(std::shared_ptr<std::vector<char>> bytes, std::string& wire_error, Read read) {
  try {
    if (bytes->size() % sizeof(capnp::word) != 0 || reinterpret_cast<uintptr_t>(bytes->data()) % 8 != 0) {
      wire_error = "malformed message: " + std::to_string(bytes->size()) + " bytes are not whole 8-byte words";
      return;
    }
    capnp::ReaderOptions options;
    options.traversalLimitInWords = bytes->size() / sizeof(capnp::word) + 1024;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(bytes->data()), bytes->size() / sizeof(capnp::word)),
        options);
    std::shared_ptr<const void> keep = bytes;
    read(reader.getRoot<W>(), keep);
  } catch (const kj::Exception& e) {
    wire_error = "malformed message: " + std::string(e.getDescription().cStr());
  } catch (const std::exception& e) {
    wire_error = std::string("malformed message: ") + e.what();
  }
}

template <class Builder>
void put_tensor(Builder b, const Tensor& t, capnp::Orphanage o) {
  try {
    write_tensor(b, t, o);
  } catch (const std::exception&) {
    // A device tensor here is a bug on the sending side; the receiver sees an empty tensor and says so.
  }
}

void put_positions(capnp::List<int32_t>::Builder b, const std::vector<int32_t>& p) {
  for (unsigned i = 0; i < p.size(); ++i) b.set(i, p[i]);
}

std::vector<int32_t> get_positions(capnp::List<int32_t>::Reader r) {
  std::vector<int32_t> out;
  out.reserve(r.size());
  for (int32_t p : r) out.push_back(p);
  return out;
}

}  // namespace

std::vector<char> encode(const info_request&) {
  return build<wire::InfoRequest>([](auto, auto) {});
}
void decode(std::shared_ptr<std::vector<char>> bytes, info_request& x) {
  parse<wire::InfoRequest>(std::move(bytes), x.wire_error, [](auto, auto&) {});
}

std::vector<char> encode(const server_info& x) {
  return build<wire::ServerInfo>([&](wire::ServerInfo::Builder b, auto) {
    b.setVersion(x.version);
    b.setModel(x.model);
    b.setPublicName(x.public_name);
    b.setAddress(x.address);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
    b.setTotalBlocks(x.total_blocks);
    b.setDtype(x.dtype);
    b.setDevice(x.device);
    b.setCacheTokensLeft(x.cache_tokens_left);
    b.setThroughput(x.throughput);
    b.setHiddenSize(x.hidden_size);
    b.setSessions(x.sessions);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, server_info& x) {
  parse<wire::ServerInfo>(std::move(bytes), x.wire_error, [&](wire::ServerInfo::Reader r, auto&) {
    x.version = r.getVersion();
    x.model = r.getModel();
    x.public_name = r.getPublicName();
    x.address = r.getAddress();
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
    x.total_blocks = r.getTotalBlocks();
    x.dtype = r.getDtype();
    x.device = r.getDevice();
    x.cache_tokens_left = r.getCacheTokensLeft();
    x.throughput = r.getThroughput();
    x.hidden_size = r.getHiddenSize();
    x.sessions = r.getSessions();
  });
}

std::vector<char> encode(const open_session& x) {
  return build<wire::OpenSession>([&](wire::OpenSession::Builder b, auto) {
    b.setMaxLength(x.max_length);
    b.setBatch(x.batch);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, open_session& x) {
  parse<wire::OpenSession>(std::move(bytes), x.wire_error, [&](wire::OpenSession::Reader r, auto&) {
    x.max_length = r.getMaxLength();
    x.batch = r.getBatch();
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
  });
}

std::vector<char> encode(const session_opened& x) {
  return build<wire::SessionOpened>([&](wire::SessionOpened::Builder b, auto) {
    b.setSessionId(x.session_id);
    b.setCacheTokensLeft(x.cache_tokens_left);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, session_opened& x) {
  parse<wire::SessionOpened>(std::move(bytes), x.wire_error, [&](wire::SessionOpened::Reader r, auto&) {
    x.session_id = r.getSessionId();
    x.cache_tokens_left = r.getCacheTokensLeft();
  });
}

std::vector<char> encode(const step_request& x) {
  return build<wire::StepRequest>([&](wire::StepRequest::Builder b, capnp::Orphanage o) {
    b.setSessionId(x.session_id);
    b.setStepId(x.step_id);
    put_tensor(b.initHidden(), x.hidden, o);
    put_positions(b.initPositions(static_cast<unsigned>(x.positions.size())), x.positions);
    auto next = b.initNext(static_cast<unsigned>(x.next.size()));
    for (unsigned i = 0; i < x.next.size(); ++i) {
      next[i].setAddress(x.next[i].address);
      next[i].setSessionId(x.next[i].session_id);
    }
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, step_request& x) {
  parse<wire::StepRequest>(std::move(bytes), x.wire_error, [&](wire::StepRequest::Reader r, auto& keep) {
    x.session_id = r.getSessionId();
    x.step_id = r.getStepId();
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    x.positions = get_positions(r.getPositions());
    for (auto hop : r.getNext()) x.next.push_back({hop.getAddress(), hop.getSessionId()});
  });
}

std::vector<char> encode(const step_reply& x) {
  return build<wire::StepReply>([&](wire::StepReply::Builder b, capnp::Orphanage o) {
    b.setSessionId(x.session_id);
    b.setStepId(x.step_id);
    put_tensor(b.initHidden(), x.hidden, o);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, step_reply& x) {
  parse<wire::StepReply>(std::move(bytes), x.wire_error, [&](wire::StepReply::Reader r, auto& keep) {
    x.session_id = r.getSessionId();
    x.step_id = r.getStepId();
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
  });
}

std::vector<char> encode(const forward_request& x) {
  return build<wire::ForwardRequest>([&](wire::ForwardRequest::Builder b, capnp::Orphanage o) {
    put_tensor(b.initHidden(), x.hidden, o);
    put_positions(b.initPositions(static_cast<unsigned>(x.positions.size())), x.positions);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, forward_request& x) {
  parse<wire::ForwardRequest>(std::move(bytes), x.wire_error, [&](wire::ForwardRequest::Reader r, auto& keep) {
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    x.positions = get_positions(r.getPositions());
  });
}

std::vector<char> encode(const forward_reply& x) {
  return build<wire::ForwardReply>(
      [&](wire::ForwardReply::Builder b, capnp::Orphanage o) { put_tensor(b.initHidden(), x.hidden, o); });
}
void decode(std::shared_ptr<std::vector<char>> bytes, forward_reply& x) {
  parse<wire::ForwardReply>(std::move(bytes), x.wire_error, [&](wire::ForwardReply::Reader r, auto& keep) {
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
  });
}

std::vector<char> encode(const close_session& x) {
  return build<wire::CloseSession>([&](wire::CloseSession::Builder b, auto) { b.setSessionId(x.session_id); });
}
void decode(std::shared_ptr<std::vector<char>> bytes, close_session& x) {
  parse<wire::CloseSession>(std::move(bytes), x.wire_error,
                            [&](wire::CloseSession::Reader r, auto&) { x.session_id = r.getSessionId(); });
}

std::vector<char> encode(const ack&) {
  return build<wire::Ack>([](auto, auto) {});
}
void decode(std::shared_ptr<std::vector<char>> bytes, ack& x) {
  parse<wire::Ack>(std::move(bytes), x.wire_error, [](auto, auto&) {});
}

}  // namespace corolla
