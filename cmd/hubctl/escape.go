package main

import "strings"

// Names and values that hubctl prints come from the cluster's tenants: the
// names of types validated only as path segments (Roles, RoleBindings,
// ...) may hold ESC, \r, \n and \t, and so may the keys of a custom
// resource's unknown fields and the values that count --by groups by.
// Printed raw, "evil\x1b[31m\nADDED\tkube-system\tadmin" would color the
// terminal and forge a row. hubctl escapes them as kubectl does
// (k8s.io/cli-runtime/pkg/printers, terminal.go and tableprinter.go's
// appendCellValue, Copyright The Kubernetes Authors, Apache License 2.0;
// kubernetes PR #112553): its few lines are copied here rather than
// cli-runtime and its dependencies required for them. -o json and -o
// yaml are data, and left as they are, as kubectl leaves them.

// terminalEscaper is cli-runtime's EscapeTerminal: ESC → ^[, \r → \r
// (a backslash and an r), readable but not reversible.
var terminalEscaper = strings.NewReplacer("\x1b", "^[", "\r", `\r`)

// escapeTerminal is cli-runtime's printers.EscapeTerminal, for text that
// may span lines (an error's message, with a CEL expression and its
// carets): it keeps \n.
func escapeTerminal(s string) string {
	if !strings.ContainsAny(s, "\x1b\r") {
		return s
	}
	return terminalEscaper.Replace(s)
}

// cellBreakChars end a cell's text: kubectl cuts the cell there and
// appends "...". \f is one because tabwriter takes it for a newline.
const cellBreakChars = "\f\n\r"

// escapeCell is a value as a table cell, a diff line or a name in a
// message prints it, on one line: cut at the first \n, \r or \f with
// "..." appended, ESC escaped, as kubectl's appendCellValue does; and,
// beyond kubectl, a tab written as \t (a backslash and a t), since a tab
// would start a new column in the tabwriter.
func escapeCell(s string) string {
	if !strings.ContainsAny(s, cellBreakChars+"\x1b\t") {
		return s
	}
	cut := false
	if i := strings.IndexAny(s, cellBreakChars); i >= 0 {
		s, cut = s[:i], true
	}
	s = strings.ReplaceAll(terminalEscaper.Replace(s), "\t", `\t`)
	if cut {
		s += "..."
	}
	return s
}
