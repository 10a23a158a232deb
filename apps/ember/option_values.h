#pragma once
// Strict option values for every subcommand of the ember command (apps/ember/main.cpp).
//
// Note [Strict option values]
// CLI11 converts what it is given as leniently as the C library does: an empty value becomes 0
// or an empty path (`--momentum ""` meant 0, `--resume ""` started a fresh run), an integer past
// int64 saturates (strtoll), "010" is octal 8 and "0x10" hex 16. make_values_strict() puts a
// check before every conversion: an empty value is an error naming the option; an integer must
// be decimal digits with an optional sign, within int64 (an unsigned one without '-'), and is
// rewritten to its canonical decimal, so that CLI11 converts exactly the number that was checked.
// An integer that fits int64 but not the option's narrower type fails CLI11's own conversion,
// which conversion_error() then reports as out of range. Range checks that depend on the option
// (--epochs >= 1, ...) stay with the option (train::check_options).

#include <CLI/CLI.hpp>
#include <string>

namespace ember::app {

// Adds the checks of Note [Strict option values] to every option that takes a value, in `app`
// and all its subcommands. Call after every option was added, before parsing.
void make_values_strict(CLI::App& app);

// The one-line message for CLI11's "Could not convert: --name = value" (after make_values_strict
// checked the text): "--name: 'value' is out of range" for a decimal integer, "--name: 'value' is
// not a number" otherwise.
std::string conversion_error(const std::string& name, const std::string& value);

}  // namespace ember::app
