// Sets an environment variable for one scope (the prefill plan's FASTKDA_PREFILL_* tuning knobs),
// unset again at its end. Tests only: setenv is not thread-safe, and each gtest case runs in its
// own process under ctest.
#pragma once

#include <cstdlib>
#include <string>

namespace fastkda_test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace fastkda_test
