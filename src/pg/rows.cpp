// shardkit::pg::Rows: libpq's accessors, and libpqxx's checks and errors
// where pqxx::result has them.
#include "shardkit/pg/rows.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <pqxx/except>
#include <string>

namespace shardkit::pg {

Rows::Rows(pg_result* result) {
  if (result != nullptr)
    result_ = detail::Result(result, [](const pg_result* r) { PQclear(const_cast<pg_result*>(r)); });
}

Rows::size_type Rows::size() const noexcept {
  return result_ ? static_cast<size_type>(PQntuples(result_.get())) : 0;
}

Row Rows::at(size_type row) const {
  if (row >= size()) throw pqxx::range_error("Row number out of range.");
  return (*this)[row];
}

pqxx::row_size_type Rows::columns() const noexcept {
  return result_ ? static_cast<pqxx::row_size_type>(PQnfields(result_.get())) : 0;
}

const char* Rows::column_name(pqxx::row_size_type column) const {
  const char* name = result_ ? PQfname(result_.get(), static_cast<int>(column)) : nullptr;
  if (name == nullptr) {
    throw pqxx::range_error("Invalid column number: " + std::to_string(column) + " (maximum is " +
                            std::to_string(static_cast<long>(columns()) - 1) + ").");
  }
  return name;
}

pqxx::oid Rows::column_type(pqxx::row_size_type column) const {
  const pqxx::oid type = result_ ? PQftype(result_.get(), static_cast<int>(column)) : InvalidOid;
  if (type == InvalidOid) {
    throw pqxx::argument_error("Attempt to retrieve type of nonexistent column " + std::to_string(column) +
                               " of query result.");
  }
  return type;
}

pqxx::row_size_type Rows::column_number(const char* name) const {
  const int number = result_ ? PQfnumber(result_.get(), name) : -1;
  if (number == -1) throw pqxx::argument_error("Unknown column name: '" + std::string(name) + "'.");
  return static_cast<pqxx::row_size_type>(number);
}

Rows::size_type Rows::affected_rows() const {
  const char* tuples = result_ ? PQcmdTuples(const_cast<pg_result*>(result_.get())) : "";
  return tuples[0] == '\0' ? 0 : static_cast<size_type>(std::strtoul(tuples, nullptr, 10));
}

Row::size_type Row::size() const noexcept {
  return result_ ? static_cast<size_type>(PQnfields(result_.get())) : 0;
}

Field Row::operator[](const char* name) const {
  return Field(result_, row_, static_cast<int>(column_number(name)));
}

Field Row::at(size_type column) const {
  if (column >= size()) throw pqxx::range_error("Invalid field number.");
  return (*this)[column];
}

Row::size_type Row::column_number(const char* name) const {
  const int number = result_ ? PQfnumber(result_.get(), name) : -1;
  if (number == -1) throw pqxx::argument_error("Unknown column name: '" + std::string(name) + "'.");
  return static_cast<size_type>(number);
}

bool Field::is_null() const noexcept {
  return PQgetisnull(result_.get(), row_, column_) != 0;
}

const char* Field::c_str() const noexcept {
  return PQgetvalue(result_.get(), row_, column_);
}

Field::size_type Field::size() const noexcept {
  return static_cast<size_type>(PQgetlength(result_.get(), row_, column_));
}

const char* Field::name() const {
  const char* name = PQfname(result_.get(), column_);
  if (name == nullptr) throw pqxx::range_error("Invalid column number: " + std::to_string(column_) + ".");
  return name;
}

pqxx::oid Field::type() const {
  const pqxx::oid type = PQftype(result_.get(), column_);
  if (type == InvalidOid) {
    throw pqxx::argument_error("Attempt to retrieve type of nonexistent column " + std::to_string(column_) +
                               " of query result.");
  }
  return type;
}

}  // namespace shardkit::pg
