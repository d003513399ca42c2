package s3blob

// SetPageSize sets the keys per List page and per DeleteObjects request,
// so tests see several pages without thousands of objects.
func (s *Store) SetPageSize(n int) { s.page = n }
