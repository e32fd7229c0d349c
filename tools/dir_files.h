// The files of a directory whose names start with `prefix` and end with `suffix`, as
// paths under it, sorted: how sn_doctor and sn_top find what the ranks left there.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

namespace snccl::tools {

inline std::vector<std::string> filesIn(const std::string& dir, const std::string& prefix, const std::string& suffix) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace snccl::tools
