#pragma once
// Names from files (class directories, image paths, run directories) as they are printed to a
// terminal, and as they are printed in a command for the user to copy.
//
// Note [Printing untrusted names]
// A class directory or a file may be named anything but '/' and NUL: "\e]0;owned\a", "\e[2J", a
// carriage return that overwrites the line before it. Written to a terminal as they are, such
// bytes are commands to it (set the title, clear the screen, move the cursor), so what ember
// prints would not be what the tree holds. printable() writes every control byte (below 0x20,
// and 0x7F) as a C escape (\n, \t, \e, \x01, ...): printable text, one line per name. Bytes of
// 0x80 and above pass unchanged, so UTF-8 names read as they are (C1 controls sit there too, but
// need an 8-bit terminal mode that terminals leave off). JSON output (--json, metrics) needs
// none of this: JSON escapes control characters itself.
//
// A command ember prints for the user to run ("continue with: ember train --resume DIR") has
// each argument shell_quote()d, so that a directory named "a b" or "x;rm -rf y" is one argument
// to the shell, exactly as it is; a name with control bytes is written in bash's $'...' form,
// which spells them as escapes (printable) and means them exactly (bash, zsh and ksh read it).

#include <string>
#include <string_view>

namespace ember::train {

// Whether printable() keeps line breaks: an error message of several lines keeps them.
enum class Newlines { escape, keep };

// `text` with its control bytes escaped (Note [Printing untrusted names]).
std::string printable(std::string_view text, Newlines newlines = Newlines::escape);

// `arg` as one shell word: unchanged when it holds only [A-Za-z0-9_@%+=:,./-] (and is not
// empty); with control bytes, $'...' with C escapes; else in single quotes, each ' as '\''.
std::string shell_quote(std::string_view arg);

}  // namespace ember::train
