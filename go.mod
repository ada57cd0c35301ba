module github.com/tagalloc/tagalloc

go 1.26
