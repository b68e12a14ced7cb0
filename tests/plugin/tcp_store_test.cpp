#include "plugin/torch/tcp_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

struct OptionsWithLibUV {  // as LibTorch 2.x's TCPStoreOptions, whose default asks for libuv
  bool useLibUV = true;
};
struct OptionsWithout {};  // as 1.x's

TEST(TcpStore, AsksForTheBuiltInBackendWhereTheOptionExists) {
  OptionsWithLibUV with;
  cloudtune::plugin::detail::UseBuiltInBackend(with);
  EXPECT_FALSE(with.useLibUV);
  OptionsWithout without;  // compiles, and leaves nothing to set
  cloudtune::plugin::detail::UseBuiltInBackend(without);
  EXPECT_TRUE(cloudtune::plugin::detail::HasUseLibUV<OptionsWithLibUV>::value);
  EXPECT_FALSE(cloudtune::plugin::detail::HasUseLibUV<OptionsWithout>::value);
}

TEST(TcpStore, ServerAndClientOnTheseOptionsTalk) {
  auto server = cloudtune::plugin::ServeStore(0, std::chrono::seconds(10));
  c10d::TCPStoreOptions co = cloudtune::plugin::StoreOptions();
  co.port = server->getPort();
  co.isServer = false;
  co.waitWorkers = false;
  co.timeout = std::chrono::seconds(10);
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);
  client->set("k", std::vector<uint8_t>{'v'});
  EXPECT_EQ(server->get("k"), std::vector<uint8_t>{'v'});
}

}  // namespace
