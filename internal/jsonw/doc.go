// Package jsonw appends JSON values to a byte slice exactly as
// encoding/json writes the same Go values, without reflection and without
// allocating beyond the slice's growth. It is the fast path for what is
// written tens of thousands of times: the rows of rdmatool's resource
// listings and the events of `rdmatool trace -j`. Everything else uses
// encoding/json.
//
// Strings are escaped as encoding/json escapes them: ", \ and control
// characters (\b, \f, \n, \r, \t by name, the others as \u00XX), the HTML
// characters <, > and & as \u003c, \u003e and \u0026, U+2028 and U+2029
// as \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
// Integers are decimal, and a float64 is written in encoding/json's form:
// plain decimals, exponents only below 1e-6 and from 1e21 on.
//
// Object member names are the writer's own: it appends them as literals
// (`{"ifindex":`, `,"lqpn":`), the bytes encoding/json writes for a field
// tagged json:"lqpn". A snake_case name needs no escaping, and a literal
// costs nothing at run time, where escaping each name would cost as much
// as a string value.
//
// A type that writes itself through jsonw is held to encoding/json's
// bytes by its own tests; this package's fuzz targets hold the string and
// float encoders to encoding/json's for any input. It does not indent,
// validate or decode JSON, and it imports only the standard library.
package jsonw
