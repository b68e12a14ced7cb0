// Fuzzes the HTTP endpoint's request handling (runtime::HttpRespond: Beast's request parser with
// the server's limits, then the routing to the providers). It must never throw, and every complete
// request gets a well-formed answer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "plugin/runtime/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cloudtune::runtime::HttpOptions;
  using cloudtune::runtime::HttpProviders;
  static const HttpOptions options = [] {
    HttpOptions o;
    o.max_header_bytes = 1024;  // small limits so the fuzzer reaches them
    o.max_body_bytes = 64;
    return o;
  }();
  static const HttpProviders providers = [] {
    HttpProviders p;
    p.recommendation = [] { return std::string(); };  // none yet: 503
    p.profile_json = [] { return std::string("{\"profile\":[]}"); };
    p.profile_csv = [] { return std::string("num_nodes,num_replicas\n"); };
    p.metrics = []() -> std::string { throw std::runtime_error("provider failed"); };  // 500
    return p;
  }();
  const std::string answer = cloudtune::runtime::HttpRespond(
      std::string_view(reinterpret_cast<const char*>(data), size), options, providers);
  if (!answer.empty() && answer.compare(0, 7, "HTTP/1.") != 0)
    std::abort();  // an answer that is not an HTTP/1.x status line
  return 0;
}
