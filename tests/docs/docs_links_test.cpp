// The user's documentation resolves inside the repository: every relative link and #anchor in
// README.md and docs/*.md names a file (or folder) of the repository and a heading of the page
// it points at, and no page cites what a user of the repository does not have (the project's
// internal design notes, gathered references, issue numbers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool is_fence(const std::string& line) {
  const size_t i = line.find_first_not_of(' ');
  return i != std::string::npos && line.compare(i, 3, "```") == 0;
}

// GitHub's heading anchor: lower case, punctuation other than '-' and '_' dropped, spaces to
// '-'; a repeated heading gets "-1", "-2", ...
std::set<std::string> anchors_of(const std::string& text) {
  std::set<std::string> out;
  std::map<std::string, int> seen;
  bool code = false;
  static const std::regex html_anchor(R"re(<a\s+(?:id|name)="([^"]+)")re");
  for (const std::string& line : lines_of(text)) {
    if (is_fence(line)) code = !code;
    if (code) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), html_anchor), end; it != end; ++it)
      out.insert((*it)[1]);
    size_t level = 0;
    while (level < line.size() && line[level] == '#') ++level;
    if (level == 0 || level > 6 || level >= line.size() || line[level] != ' ') continue;
    std::string title = line.substr(level + 1);
    while (!title.empty() && (title.back() == '#' || title.back() == ' ')) title.pop_back();
    std::string slug;
    for (unsigned char c : title) {
      if (c >= 0x80 || std::isalnum(c) || c == '-' || c == '_')
        slug += static_cast<char>(c < 0x80 ? std::tolower(c) : c);
      else if (c == ' ')
        slug += '-';
    }
    const int n = seen[slug]++;
    out.insert(n == 0 ? slug : slug + "-" + std::to_string(n));
  }
  return out;
}

struct Link {
  int line = 0;
  std::string target;
};

// Markdown links and images outside code: [text](target) and ![alt](target). Code spans inside
// the link text ([`docs/x.md`](docs/x.md)) are part of the link.
std::vector<Link> links_of(const std::string& text) {
  std::vector<Link> out;
  bool fence = false;
  int n = 0;
  for (const std::string& line : lines_of(text)) {
    ++n;
    if (is_fence(line)) {
      fence = !fence;
      continue;
    }
    if (fence) continue;
    bool code = false;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '`') {
        code = !code;
        continue;
      }
      if (code || line[i] != '[') continue;
      // the link text, which may hold code spans and nested brackets
      int depth = 0;
      size_t j = i;
      bool in_code = false;
      for (; j < line.size(); ++j) {
        if (line[j] == '`') in_code = !in_code;
        if (in_code) continue;
        if (line[j] == '[') ++depth;
        if (line[j] == ']' && --depth == 0) break;
      }
      if (j + 1 >= line.size() || line[j + 1] != '(') continue;
      const size_t close = line.find(')', j + 2);
      if (close == std::string::npos) continue;
      std::string target = line.substr(j + 2, close - j - 2);
      if (const size_t sp = target.find(' '); sp != std::string::npos) target.resize(sp);
      out.push_back({n, target});
      i = close;
    }
  }
  return out;
}

// Problems of the pages `pages` (relative to `root`): "file:line: what".
std::vector<std::string> check_pages(const fs::path& root, const std::vector<fs::path>& pages) {
  std::vector<std::string> problems;
  const fs::path croot = fs::weakly_canonical(root);
  // What a reader of the repository cannot open: the project's internal notes.
  static const std::vector<std::pair<std::regex, std::string>> citations = {
      {std::regex(R"(DESIGN(\.md)?\s*§|DESIGN\.md)"), "cites the internal design notes"},
      {std::regex(R"(STYLE\.md)"), "cites the internal style notes"},
      {std::regex(R"(\.\./shared|reference/[A-Za-z_-]+\.md)"), "cites the gathered references"},
      {std::regex(R"(§\s*\d)"), "cites a section by number (link to its heading instead)"},
      {std::regex(R"([Ii]ssue \d+)"), "cites an issue number"},
  };
  std::map<fs::path, std::set<std::string>> anchor_cache;
  for (const fs::path& rel : pages) {
    const fs::path page = root / rel;
    const std::string text = read(page);
    const auto lines = lines_of(text);
    for (size_t i = 0; i < lines.size(); ++i)
      for (const auto& [re, why] : citations)
        if (std::regex_search(lines[i], re))
          problems.push_back(rel.string() + ":" + std::to_string(i + 1) + ": " + why + ": " +
                             lines[i]);
    for (const Link& l : links_of(text)) {
      const std::string where = rel.string() + ":" + std::to_string(l.line) + ": ";
      const std::string& t = l.target;
      if (t.rfind("http://", 0) == 0 || t.rfind("https://", 0) == 0 || t.rfind("mailto:", 0) == 0)
        continue;
      if (t.empty() || t[0] == '/' || t.find("://") != std::string::npos) {
        problems.push_back(where + "not a relative link: '" + t + "'");
        continue;
      }
      const size_t hash = t.find('#');
      const std::string path = t.substr(0, hash);
      const std::string anchor = hash == std::string::npos ? "" : t.substr(hash + 1);
      const fs::path dest = path.empty() ? page : page.parent_path() / path;
      const fs::path cdest = fs::weakly_canonical(dest);
      const std::string rel_dest = fs::relative(cdest, croot).generic_string();
      if (rel_dest.empty() || rel_dest.rfind("..", 0) == 0) {
        problems.push_back(where + "leaves the repository: '" + t + "'");
        continue;
      }
      if (!fs::exists(cdest)) {
        problems.push_back(where + "no such file: '" + t + "'");
        continue;
      }
      if (anchor.empty() || cdest.extension() != ".md") continue;
      auto it = anchor_cache.find(cdest);
      if (it == anchor_cache.end()) it = anchor_cache.emplace(cdest, anchors_of(read(cdest))).first;
      if (!it->second.count(anchor))
        problems.push_back(where + "no heading '#" + anchor + "' in " + rel_dest);
    }
  }
  return problems;
}

std::vector<fs::path> user_pages(const fs::path& root) {
  std::vector<fs::path> pages = {"README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") pages.push_back(fs::path("docs") / e.path().filename());
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(DocsLinks, EveryLinkAndAnchorOfTheUserPagesResolvesInsideTheRepository) {
  const fs::path root = STRETTO_SOURCE_DIR;
  const auto pages = user_pages(root);
  ASSERT_GE(pages.size(), 5u);
  size_t links = 0;
  for (const auto& p : pages) links += links_of(read(root / p)).size();
  EXPECT_GT(links, 30u) << "the link scanner found almost no links: is it broken?";
  const auto problems = check_pages(root, pages);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(DocsLinks, TheReadmeStaysAFrontDoor) {
  const std::string readme = read(fs::path(STRETTO_SOURCE_DIR) / "README.md");
  EXPECT_LE(lines_of(readme).size(), 300u);
  // The two commands come first, exactly as CI runs them.
  const size_t run = readme.find("bash scripts/run.sh"), test = readme.find("bash scripts/test.sh");
  ASSERT_NE(run, std::string::npos);
  ASSERT_NE(test, std::string::npos);
  EXPECT_LT(run, readme.find("\n## "));
  EXPECT_LT(test, readme.find("\n## "));
}

TEST(DocsLinks, TheCheckerFindsBrokenLinksAnchorsAndInternalCitations) {
  const fs::path dir = fs::temp_directory_path() / ("docs_links_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "docs");
  std::ofstream(dir / "README.md")
      << "# Title\n\n## A `code` heading (x)\n\n"
         "[ok](docs/a.md#second-part) [ok2](#a-code-heading-x) [`ok3`](docs/a.md) <https://x.y>\n"
         "[missing](docs/b.md) [bad anchor](docs/a.md#nope) [out](../outside.md)\n"
         "```\n[in a fence](nowhere.md)\n```\n"
         "`[in code](nowhere.md)`\nand see DESIGN §2\n";
  std::ofstream(dir / "docs" / "a.md")
      << "# A\n\n## Second part\n\nas reference/simulators.md §13 says, and issue 11 ([r](../README.md#title))\n";
  const auto problems = check_pages(dir, {"README.md", "docs/a.md"});
  const std::string all = joined(problems);
  EXPECT_NE(all.find("README.md:6: no such file: 'docs/b.md'"), std::string::npos) << all;
  EXPECT_NE(all.find("README.md:6: no heading '#nope' in docs/a.md"), std::string::npos) << all;
  EXPECT_NE(all.find("README.md:6: leaves the repository: '../outside.md'"), std::string::npos)
      << all;
  EXPECT_NE(all.find("README.md:11: cites the internal design notes"), std::string::npos) << all;
  EXPECT_NE(all.find("docs/a.md:5: cites the gathered references"), std::string::npos) << all;
  EXPECT_NE(all.find("docs/a.md:5: cites an issue number"), std::string::npos) << all;
  EXPECT_EQ(all.find("nowhere.md"), std::string::npos) << all;  // code is not a link
  EXPECT_EQ(all.find("ok"), std::string::npos) << all;
  EXPECT_EQ(problems.size(), 8u) << all;  // the six above and the two "§ N"
  fs::remove_all(dir);
}

}  // namespace
