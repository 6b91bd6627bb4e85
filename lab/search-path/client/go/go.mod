module nodens.lab/golookup

go 1.21
