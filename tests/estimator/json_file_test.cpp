// The one JSON reader (estimator/core/json_file.h): every failure is an InputError naming the
// source, including values the grammar allows but a double cannot hold.
#include "estimator/core/json_file.h"

#include <gtest/gtest.h>

#include "estimator/core/error.h"

namespace cloudtune::core {
namespace {

std::string Message(const std::string& text) {
  try {
    ParseJson(text, "state.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonFile, ParsesAndNamesTheSourceOfEveryFailure) {
  EXPECT_EQ(ParseJson("{\"a\": [1, 2.5]}", "x")["a"][1], 2.5);
  EXPECT_NE(
      Message("{\"a\": [1, 2").find("state.json: not valid JSON (corrupt or truncated at byte"),
      std::string::npos);
  // Found by state_fuzz: a number beyond double's range is out_of_range, not parse_error.
  const std::string huge = Message("8" + std::string(400, '8') + "E8888");
  EXPECT_EQ(huge.rfind("state.json: not valid JSON", 0), 0u) << huge;
  EXPECT_NE(Message("").find("state.json"), std::string::npos);
  try {
    ReadJsonFile("/nonexistent/x.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/x.json: cannot open");
  }
}

}  // namespace
}  // namespace cloudtune::core
