// What limits per address count (a node's connections, its DHT store quotas, the API's connections per client): an
// IPv4 address, also when it arrives IPv4-mapped on an IPv6 socket, or an IPv6 address's /64. An IPv6 host is
// commonly given a whole /64 and may pick any address in it for each connection, so counting IPv6 addresses one by
// one would give one host 2^64 shares of every quota.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <string>

namespace corolla {

// "192.0.2.7" for an IPv4 address (or ::ffff:192.0.2.7); "2001:db8:1:2::/64" for an IPv6 address in that /64.
std::string address_block(const boost::asio::ip::address& address);

}  // namespace corolla
