package contract

// CompileSchemas exposes compileSchemas (schema_test.go) to the external
// tests.
var CompileSchemas = compileSchemas
