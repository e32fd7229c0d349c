// A fresh directory under /tmp for one test's files (logs, helper output), removed with its
// contents when the object goes away, so a failing test leaves nothing behind either.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace sntest {

struct TempDir {
  std::string path;  // empty when the directory could not be made (the test then fails on use)

  explicit TempDir(const std::string& prefix = "snccl-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace sntest
