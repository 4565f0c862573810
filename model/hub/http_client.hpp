// Blocking HTTP/1.1 requests over TCP or TLS (Boost.Beast, OpenSSL; certificates checked against the system's
// store and the host name): what fetching models from a Hub-compatible endpoint needs, nothing more. One request
// per connection; redirects are the caller's to follow (it decides which headers travel to another host). The
// other side is not trusted: headers are bounded, a body goes to the caller's sink piece by piece (the sink
// bounds it) or, for answers without one, is read up to a small limit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace corolla::hub {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  std::string port;    // always set ("80"/"443" by default)
  std::string target;  // path and query, starting with '/'
  // The host as URLs and Host headers write it ("[::1]" for an IPv6 address).
  std::string host_text() const { return host.find(':') == std::string::npos ? host : "[" + host + "]"; }
  std::string origin() const { return scheme + "://" + host_text() + ":" + port; }
  std::string str() const;
};

// The URL `text` names (http or https, a host, an optional port, an optional path), or nullopt.
std::optional<Url> parse_url(std::string_view text);
// Where a Location header points from `base`: an absolute URL, or a path on the same origin.
std::optional<Url> follow_location(const Url& base, std::string_view location);

// Could not reach the server, or the connection broke: "could not connect to 127.0.0.1:1: Connection refused".
struct HttpUnreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;                            // when no sink took it: at most kSmallBodyBytes
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Bodies of answers read whole (errors, small files): larger ones are cut here.
inline constexpr size_t kSmallBodyBytes = 1 << 20;

struct HttpRequest {
  std::string method = "GET";  // "GET" or "HEAD"
  Url url;
  std::vector<std::pair<std::string, std::string>> headers;
  // Takes a 2xx answer's body piece by piece (it may throw to stop); without one the body is kept in the answer.
  std::function<void(const char* data, size_t size)> sink;
  double timeout_s = 60;  // for connecting, and for each read or write
};

// Sends the request and reads the answer. Throws HttpUnreachable when the server cannot be reached or the
// connection fails, std::runtime_error for an answer that is not HTTP.
HttpAnswer http_send(const HttpRequest& request);

}  // namespace corolla::hub
