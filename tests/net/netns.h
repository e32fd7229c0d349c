// Emulated nodes for the net tests: one network namespace per node, joined by veth pairs
// to a bridge that lives in a namespace of its own (the "switch"). With several rails,
// each node has one interface per rail (snet0, snet1, ...) on a bridge and a subnet of
// that rail's own (10.77.<rail>.0/24), as a node with several NICs on separate fabrics.
//
// Rules: only namespaces this test creates, addresses
// only 10.77.x inside them, nothing in the root namespace is touched, and everything is
// removed on every exit path: the destructor, the watchdog (cleanup() is safe to call
// from it), and at the next run for namespaces whose creating process died.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace nettest {

constexpr const char* kNsPrefix = "sncclnet-";  // + creator pid + "-" + role

// Runs a command (argv, no shell); returns its exit status, -1 when it could not run.
inline int runCmd(const std::vector<std::string>& args, bool quiet = true) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      FILE* devnull = std::freopen("/dev/null", "w", stderr);
      (void)devnull;
      devnull = std::freopen("/dev/null", "w", stdout);
      (void)devnull;
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class NetnsNodes {
 public:
  // Why the environment cannot host the test ("" when it can).
  static std::string unsupportedReason() {
    if (geteuid() != 0) return "not root";
    if (runCmd({"ip", "-V"}) != 0) return "the ip tool (iproute2) is missing";
    return "";
  }

  // Removes namespaces left by earlier runs whose creator is gone (a crash or SIGKILL).
  static void removeStale() {
    DIR* d = opendir("/run/netns");
    if (d == nullptr) return;
    std::vector<std::string> stale;
    std::string prefix = kNsPrefix;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind(prefix, 0) != 0) continue;
      pid_t creator = pid_t(std::atoi(name.c_str() + prefix.size()));
      if (creator > 0 && kill(creator, 0) != 0 && errno == ESRCH) stale.push_back(name);
    }
    closedir(d);
    for (const std::string& n : stale) runCmd({"ip", "netns", "del", n});
  }

  // Builds `nodes` namespaces, node i at 10.77.r.(i+1)/24 on interface snet<r> for each
  // rail r. Returns false (with *why) when any step fails; what was built is removed.
  bool create(int nodes, std::string* why, int rails = 1) {
    removeStale();
    std::string base = kNsPrefix + std::to_string(getpid()) + "-";
    bridge_ = base + "sw";
    std::vector<std::vector<std::string>> cmds = {{"ip", "netns", "add", bridge_}};
    for (int r = 0; r < rails; ++r) {
      std::string br = "br" + std::to_string(r);
      cmds.push_back({"ip", "-n", bridge_, "link", "add", br, "type", "bridge"});
      cmds.push_back({"ip", "-n", bridge_, "link", "set", br, "up"});
    }
    for (int i = 0; i < nodes; ++i) {
      std::string ns = base + "n" + std::to_string(i);
      nodes_.push_back(ns);
      cmds.push_back({"ip", "netns", "add", ns});
      for (int r = 0; r < rails; ++r) {
        std::string port = "p" + std::to_string(i) + (r > 0 ? "r" + std::to_string(r) : "");
        std::string ifname = railIfname(r);
        cmds.push_back({"ip", "-n", bridge_, "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", ns});
        cmds.push_back({"ip", "-n", bridge_, "link", "set", port, "master", "br" + std::to_string(r)});
        cmds.push_back({"ip", "-n", bridge_, "link", "set", port, "up"});
        cmds.push_back({"ip", "-n", ns, "addr", "add",
                        "10.77." + std::to_string(r) + "." + std::to_string(i + 1) + "/24", "dev", ifname});
        cmds.push_back({"ip", "-n", ns, "link", "set", ifname, "up"});
      }
      cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    }
    for (const auto& c : cmds) {
      if (c.size() >= 4 && c[1] == "netns" && c[2] == "add") created_.push_back(c[3]);
      if (runCmd(c) != 0) {
        *why = "command failed:";
        for (const std::string& a : c) *why += " " + a;
        cleanup();
        return false;
      }
    }
    return true;
  }

  // Takes node i's link on `rail` down or up (a cable pull).
  bool setLink(int node, bool up, int rail = 0) {
    return runCmd({"ip", "-n", nodes_[size_t(node)], "link", "set", railIfname(rail), up ? "up" : "down"}) == 0;
  }

  // Runs a command inside node i's namespace (ip netns exec), e.g. tc on a rail.
  bool exec(int node, const std::vector<std::string>& cmd) {
    std::vector<std::string> full = {"ip", "netns", "exec", nodes_[size_t(node)]};
    full.insert(full.end(), cmd.begin(), cmd.end());
    return runCmd(full) == 0;
  }

  static std::string railIfname(int rail) { return "snet" + std::to_string(rail); }

  const std::vector<std::string>& names() const { return nodes_; }

  // Idempotent; safe from the watchdog thread (only fork/exec and waitpid).
  void cleanup() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) runCmd({"ip", "netns", "del", *it});
    created_.clear();
  }

  ~NetnsNodes() { cleanup(); }

  static constexpr const char* kIfname = "snet0";

 private:
  std::string bridge_;
  std::vector<std::string> nodes_;
  std::vector<std::string> created_;
};

}  // namespace nettest
