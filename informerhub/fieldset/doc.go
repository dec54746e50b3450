// Package fieldset holds, for each resource type, the fields that field
// selectors may name, with the meaning the API server gives them: which
// fields a built-in type accepts, their aliases, and how each value is read
// from an object's JSON (builtin.go); and those of custom resources, from
// their CRD's selectableFields (ForCRD).
package fieldset
