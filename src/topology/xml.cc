// The XML reader: recursive descent over the text with a line counter. Depth is bounded
// by kXmlMaxDepth and the element count by kMaxXmlElements, so hostile nesting or size
// ends in an error, not a stack overflow or an exhausted memory.
#include "topology/xml.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace snccl::topo {

const std::string* XmlElement::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool isNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || static_cast<unsigned char>(c) >= 0x80;
}
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

void appendUtf8(std::string* out, unsigned long cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  Result<XmlElement> document() {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte order mark
    SNCCL_TRY(misc(true));
    if (atEnd()) return error("no root element");
    if (!startsWith("<")) return error("text before the root element");
    XmlElement root;
    SNCCL_TRY(element(&root, 0));
    SNCCL_TRY(misc(false));
    if (!atEnd()) {
      return error(startsWith("<") && !startsWith("<!") && !startsWith("<?") ? "a second root element"
                                                                             : "text after the root element");
    }
    return root;
  }

 private:
  bool atEnd() const { return pos_ >= s_.size(); }
  char peek() const { return atEnd() ? '\0' : s_[pos_]; }
  bool startsWith(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }
  void advance(size_t n = 1) {
    for (size_t i = 0; i < n && pos_ < s_.size(); ++i, ++pos_)
      if (s_[pos_] == '\n') ++line_;
  }
  void skipSpace() {
    while (!atEnd() && isSpace(peek())) advance();
  }

  Status error(const std::string& reason) const { return errorAt(line_, reason); }
  Status errorAt(int line, const std::string& reason) const {
    return InvalidArgument("%s:%d: %s", source_.c_str(), line, reason.c_str());
  }

  // Skips to just after `end`; error when the file ends first.
  Status skipPast(std::string_view end, const char* what) {
    int startLine = line_;
    size_t at = s_.find(end, pos_);
    if (at == std::string_view::npos) return errorAt(startLine, format("unterminated %s", what));
    advance(at + end.size() - pos_);
    return OkStatus();
  }

  // Prolog / epilog: whitespace, comments, processing instructions, DOCTYPE.
  Status misc(bool prolog) {
    for (;;) {
      skipSpace();
      if (startsWith("<!--")) {
        SNCCL_TRY(skipPast("-->", "comment"));
      } else if (startsWith("<?")) {
        SNCCL_TRY(skipPast("?>", "processing instruction"));
      } else if (prolog && startsWith("<!DOCTYPE")) {
        SNCCL_TRY(doctype());
      } else {
        return OkStatus();
      }
    }
  }

  Status doctype() {
    int startLine = line_;
    int depth = 0;
    while (!atEnd()) {
      char c = peek();
      advance();
      if (c == '[') ++depth;
      if (c == ']') --depth;
      if (c == '>' && depth <= 0) return OkStatus();
    }
    return errorAt(startLine, "unterminated DOCTYPE");
  }

  Status name(std::string* out) {
    if (!isNameStart(peek())) {
      return error(atEnd() ? "unexpected end of file, expected a name"
                           : format("expected a name, found '%c'", peek()));
    }
    size_t start = pos_;
    while (!atEnd() && isNameChar(peek())) advance();
    if (pos_ - start > 255) return error("name longer than 255 characters");
    out->assign(s_.substr(start, pos_ - start));
    return OkStatus();
  }

  // After '&': one entity reference, appended decoded.
  Status entity(std::string* out) {
    size_t semi = s_.find(';', pos_);
    if (semi == std::string_view::npos || semi - pos_ > 12) return error("'&' not followed by an entity reference");
    std::string_view ref = s_.substr(pos_, semi - pos_);
    static constexpr std::pair<std::string_view, char> kNamed[] = {
        {"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"quot", '"'}, {"apos", '\''}};
    for (const auto& [n, c] : kNamed) {
      if (ref == n) {
        out->push_back(c);
        advance(ref.size() + 1);
        return OkStatus();
      }
    }
    if (ref.size() >= 2 && ref[0] == '#') {
      bool hex = ref[1] == 'x';
      std::string digits(ref.substr(hex ? 2 : 1));
      char* end = nullptr;
      unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (!digits.empty() && end && *end == '\0' && cp > 0 && cp <= 0x10FFFF) {
        appendUtf8(out, cp);
        advance(ref.size() + 1);
        return OkStatus();
      }
    }
    return error(format("unknown entity '&%.*s;'", static_cast<int>(ref.size()), ref.data()));
  }

  Status attrValue(std::string* out) {
    char quote = peek();
    if (quote != '"' && quote != '\'') return error("attribute value must be quoted");
    int startLine = line_;
    advance();
    while (!atEnd() && peek() != quote) {
      char c = peek();
      if (c == '<') return error("'<' inside an attribute value");
      if (c == '&') {
        advance();
        SNCCL_TRY(entity(out));
        continue;
      }
      out->push_back(c);
      advance();
    }
    if (atEnd()) return errorAt(startLine, "unterminated attribute value");
    advance();
    return OkStatus();
  }

  // Attributes up to '>' or '/>'; sets *empty for '/>'.
  Status attributes(XmlElement* el, bool* empty) {
    for (;;) {
      bool spaced = !atEnd() && isSpace(peek());
      skipSpace();
      if (atEnd()) return errorAt(el->line, format("unexpected end of file inside <%s>", el->name.c_str()));
      if (startsWith("/>")) {
        advance(2);
        *empty = true;
        return OkStatus();
      }
      if (peek() == '>') {
        advance();
        *empty = false;
        return OkStatus();
      }
      if (!spaced) return error(format("expected whitespace, '>' or '/>' in <%s>", el->name.c_str()));
      std::string key, value;
      SNCCL_TRY(name(&key));
      skipSpace();
      if (peek() != '=') return error(format("attribute '%s' without '='", key.c_str()));
      advance();
      skipSpace();
      SNCCL_TRY(attrValue(&value));
      if (el->attr(key) != nullptr) return error(format("duplicate attribute '%s'", key.c_str()));
      if (el->attrs.size() >= 256) return error("more than 256 attributes");
      el->attrs.emplace_back(std::move(key), std::move(value));
    }
  }

  Status element(XmlElement* el, int depth) {
    if (depth >= kXmlMaxDepth) return error(format("elements nested deeper than %d", kXmlMaxDepth));
    if (++elements_ > kMaxXmlElements) return error(format("more than %zu elements", kMaxXmlElements));
    el->line = line_;
    advance();  // '<'
    SNCCL_TRY(name(&el->name));
    bool empty = false;
    SNCCL_TRY(attributes(el, &empty));
    if (empty) return OkStatus();
    return content(el, depth);
  }

  Status content(XmlElement* el, int depth) {
    for (;;) {
      if (atEnd()) {
        return error(format("unexpected end of file: <%s> opened at line %d is not closed", el->name.c_str(), el->line));
      }
      if (startsWith("</")) return closing(el);
      if (startsWith("<!--")) {
        SNCCL_TRY(skipPast("-->", "comment"));
      } else if (startsWith("<![CDATA[")) {
        size_t start = pos_ + 9;
        SNCCL_TRY(skipPast("]]>", "CDATA section"));
        el->text.append(s_.substr(start, pos_ - 3 - start));
      } else if (startsWith("<?")) {
        SNCCL_TRY(skipPast("?>", "processing instruction"));
      } else if (startsWith("<!")) {
        return error("unexpected '<!' inside an element");
      } else if (peek() == '<') {
        el->children.emplace_back();
        SNCCL_TRY(element(&el->children.back(), depth + 1));
      } else if (peek() == '&') {
        advance();
        SNCCL_TRY(entity(&el->text));
      } else {
        el->text.push_back(peek());
        advance();
      }
    }
  }

  Status closing(XmlElement* el) {
    advance(2);
    std::string closeName;
    SNCCL_TRY(name(&closeName));
    if (closeName != el->name) {
      return error(format("</%s> closes <%s> opened at line %d", closeName.c_str(), el->name.c_str(), el->line));
    }
    skipSpace();
    if (peek() != '>') return error(format("expected '>' after </%s", closeName.c_str()));
    advance();
    return OkStatus();
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t elements_ = 0;
};

}  // namespace

Result<XmlElement> parseXml(std::string_view text, const std::string& source) {
  if (text.find('\0') != std::string_view::npos) {
    int line = 1;
    for (char c : text.substr(0, text.find('\0'))) line += c == '\n';
    return InvalidArgument("%s:%d: NUL byte in the file (binary data?)", source.c_str(), line);
  }
  return Parser(text, source).document();
}

Result<std::string> readTextFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; only regular
  // files are read, and their size is checked before anything is allocated.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open %s", path.c_str());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError(e, "cannot stat %s", path.c_str());
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument("%s: not a regular file (a FIFO, device or directory), not a topology file", path.c_str());
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxTopoFileBytes) {
    close(fd);
    return InvalidArgument("%s: %lld bytes, larger than the %zu MiB a topology file may have", path.c_str(),
                           static_cast<long long>(st.st_size), kMaxTopoFileBytes >> 20);
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return ErrnoError(e, "cannot read %s", path.c_str());
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxTopoFileBytes) {  // the file grew while being read
      close(fd);
      return InvalidArgument("%s: larger than the %zu MiB a topology file may have", path.c_str(),
                             kMaxTopoFileBytes >> 20);
    }
  }
  close(fd);
  return data;
}

Status writeTextFile(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return ErrnoError(errno, "cannot create %s", path.c_str());
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int err = std::ferror(f) ? errno : 0;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (n != text.size() || err != 0) return ErrnoError(err, "cannot write %s", path.c_str());
  return OkStatus();
}

std::string xmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace snccl::topo
