#include "core/ids.h"

#include <array>
#include <sodium.h>

namespace gpucloud {
namespace {
constexpr std::string_view kAlphabet = "0123456789abcdefghjkmnpqrstvwxyz";  // Crockford, no i l o u
constexpr std::size_t kIdChars = 12;
constexpr std::array<std::string_view, 10> kPrefixes = {"u", "h", "i", "d", "snap", "img",
                                                         "sg", "key", "tok", "le"};
bool is_alphabet_char(char c) { return kAlphabet.find(c) != std::string_view::npos; }
}  // namespace

std::string new_id(std::string_view prefix) {
  std::array<unsigned char, kIdChars> raw{};
  randombytes_buf(raw.data(), raw.size());
  std::string id(prefix);
  id += '-';
  for (unsigned char byte : raw) id += kAlphabet[byte % 32];
  return id;
}

bool looks_like_id(std::string_view text, std::string_view prefix) {
  if (text.size() != prefix.size() + 1 + kIdChars) return false;
  if (text.substr(0, prefix.size()) != prefix || text[prefix.size()] != '-') return false;
  for (char c : text.substr(prefix.size() + 1))
    if (!is_alphabet_char(c)) return false;
  return true;
}

bool looks_like_any_id(std::string_view text) {
  for (auto prefix : kPrefixes)
    if (looks_like_id(text, prefix)) return true;
  return false;
}

bool is_valid_resource_name(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return !looks_like_any_id(name);
}

bool is_valid_username(std::string_view name) {
  if (name.size() < 3 || name.size() > 32) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  return true;
}

}  // namespace gpucloud
