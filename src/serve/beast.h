// Boost.Beast + Asio (header-only, Debian's libboost-dev) for the HTTP server and its tests.
// <utility> comes first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it,
// which GCC 12 in C++20 mode does not forgive.
#pragma once

// clang-format off
#include <utility>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
// clang-format on
