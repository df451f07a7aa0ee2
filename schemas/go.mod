module github.com/receiptflow/receiptflow/schemas

go 1.26.0
