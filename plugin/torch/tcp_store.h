// Options for a c10d::TCPStore that every LibTorch cloudtune builds against can honour, and a
// served store on them. Used by the plugin's client of the job's store and by the examples' and
// benchmark's process groups.
#pragma once

#include <chrono>
#include <cstdint>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>
#include <utility>

namespace cloudtune::plugin {

namespace detail {
template <typename O, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename O>
struct HasUseLibUV<O, std::void_t<decltype(std::declval<O&>().useLibUV)>> : std::true_type {};

template <typename O>
void UseBuiltInBackend(O& o) {
  if constexpr (HasUseLibUV<O>::value) o.useLibUV = false;
}
}  // namespace detail

// Default TCPStore options, with the store's built-in backend. LibTorch 2.x has a second backend
// on libuv and, from 2.4, asks for it by default; a LibTorch built without libuv (Debian 13's)
// then refuses to create any store, client or server. The built-in backend is in every build (the
// only one in 1.x) and serves a training job's rendezvous and cloudtune's few keys alike.
inline c10d::TCPStoreOptions StoreOptions() {
  c10d::TCPStoreOptions o;
  detail::UseBuiltInBackend(o);
  return o;
}

// A store served on 127.0.0.1:`port` (0: a port the kernel picks; getPort() says which) that waits
// for no worker, as a launcher or torchrun's agent serves one. Throws what TCPStore throws (a port
// in use, say).
inline c10::intrusive_ptr<c10d::TCPStore> ServeStore(uint16_t port, std::chrono::seconds timeout) {
  c10d::TCPStoreOptions o = StoreOptions();
  o.port = port;
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

}  // namespace cloudtune::plugin
