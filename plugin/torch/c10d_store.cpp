#include "plugin/torch/c10d_store.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "plugin/torch/tcp_store.h"

namespace cloudtune::plugin {
namespace {

class C10dStore : public runtime::KeyValueStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void Set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string Get(const std::string& key) override {
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  }
  void Delete(const std::string& key) override { store_->deleteKey(key); }
  long long Add(const std::string& key, long long delta) override {
    return store_->add(key, delta);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<runtime::KeyValueStore> ConnectJobStore(const core::LaunchEnv& launch,
                                                        std::string* error) {
  try {
    c10d::TCPStoreOptions so = StoreOptions();
    so.port = static_cast<uint16_t>(launch.master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = std::chrono::seconds(5);  // connecting blocks Init at most this long
    auto store = c10::make_intrusive<c10d::TCPStore>(
        launch.master_addr.empty() ? "127.0.0.1" : launch.master_addr, so);
    store->setTimeout(std::chrono::seconds(30));  // a gather waits at most this long
    const std::string prefix = launch.AttemptPrefix();
    if (prefix.empty()) return std::make_shared<C10dStore>(std::move(store));
    return std::make_shared<C10dStore>(c10::make_intrusive<c10d::PrefixStore>(prefix, store));
  } catch (const std::exception& e) {
    if (error) *error = std::string("c10d store: ") + e.what();
    return nullptr;
  }
}

}  // namespace cloudtune::plugin
