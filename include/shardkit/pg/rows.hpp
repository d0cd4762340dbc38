// shardkit/pg/rows.hpp — the rows of one statement, read straight from the
// result libpq returned.
//
// What a scatter (ShardResult::rows) and a routed read
// (RoutedTransactions::Read) hand back. The interface is the part of
// pqxx::result's that reading rows needs, spelled the same, and values
// convert exactly as libpqxx converts them (through pqxx::string_traits, so
// every type libpqxx or shardkit teaches it reads alike, and a NULL read
// with as<T>() throws pqxx::conversion_error as libpqxx's field does).
// as<std::optional<T>>() reads NULL as nullopt and anything else as
// as<T>() does (Debian's libpqxx 6.4 cannot: it is built without
// std::optional support):
//
//   const shardkit::pg::Rows& rows = result.shards[0].rows;
//   for (const auto& row : rows) {
//     auto id = row["order_id"].as<std::int64_t>();
//     auto note = row[2].as<std::optional<std::string>>();   // NULL: nullopt
//     if (!row[3].is_null()) std::puts(row[3].c_str());
//   }
//   rows.column_name(0); rows.column_type(0); rows.size(); rows[1][0].as<int>();
//
// A Rows owns its libpq result, shared: copies are cheap, and the result is
// freed once, with the last copy. A Row or Field keeps it alive too (as
// libpqxx's do), so either may outlive the Rows it came from.
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <optional>
#include <pqxx/strconv>  // before field: libpqxx 6.4's field.hxx needs string_traits declared
#include <pqxx/types>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <pqxx/field>

struct pg_result;  // libpq's PGresult

namespace shardkit::pg {

class Rows;
class Row;

namespace detail {
using Result = std::shared_ptr<const pg_result>;
}  // namespace detail

// One value of one row.
class Field {
  template <typename T>
  struct IsOptional : std::false_type {};
  template <typename U>
  struct IsOptional<std::optional<U>> : std::true_type {};

 public:
  using size_type = pqxx::field_size_type;

  [[nodiscard]] bool is_null() const noexcept;
  // The value's text, zero-terminated; "" for NULL.
  [[nodiscard]] const char* c_str() const noexcept;
  // Bytes of the value (without the terminating zero).
  [[nodiscard]] size_type size() const noexcept;
  [[nodiscard]] std::string_view view() const noexcept { return {c_str(), size()}; }
  [[nodiscard]] const char* name() const;
  [[nodiscard]] pqxx::oid type() const;
  [[nodiscard]] pqxx::row_size_type num() const noexcept { return static_cast<pqxx::row_size_type>(column_); }

  // libpqxx's field::to: false (obj untouched) for NULL.
  template <typename T>
  bool to(T& obj) const {
    const char* const bytes = c_str();
    if (bytes[0] == '\0' && is_null()) return false;
    if constexpr (std::is_same_v<T, std::string>) {
      obj = std::string(bytes, size());
    } else if constexpr (std::is_same_v<T, const char*>) {
      obj = bytes;
    } else if constexpr (IsOptional<T>::value) {
      typename T::value_type value{};
      (void)to(value);
      obj = std::move(value);
    } else {
      static_assert(!std::is_pointer_v<T>, "only const char* among pointers (the value's storage is the result's)");
      pqxx::from_string(bytes, obj);
    }
    return true;
  }
  template <typename T>
  bool to(T& obj, const T& default_value) const {
    const bool not_null = to(obj);
    if (!not_null) obj = default_value;
    return not_null;
  }
  // The value as T; NULL throws pqxx::conversion_error, unless T has a null
  // (const char*: nullptr; std::optional<U>: nullopt).
  template <typename T>
  [[nodiscard]] T as() const {
    T obj;
    if constexpr (IsOptional<T>::value) {
      (void)to(obj);
    } else if (!to(obj)) {
      obj = pqxx::string_traits<T>::null();
    }
    return obj;
  }
  template <typename T>
  [[nodiscard]] T as(const T& default_value) const {
    T obj;
    to(obj, default_value);
    return obj;
  }

 private:
  friend class Row;
  Field(detail::Result result, int row, int column) noexcept : result_(std::move(result)), row_(row), column_(column) {}

  detail::Result result_;
  int row_ = 0;
  int column_ = 0;
};

// One row: its fields by column number or name.
class Row {
 public:
  using size_type = pqxx::row_size_type;

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = Field;
    using difference_type = pqxx::row_difference_type;
    using pointer = const Field*;
    using reference = const Field&;

    const_iterator() = default;
    reference operator*() const noexcept { return field_; }
    pointer operator->() const noexcept { return &field_; }
    const_iterator& operator++() noexcept {
      ++field_.column_;
      return *this;
    }
    const_iterator operator++(int) noexcept {
      const_iterator before = *this;
      ++field_.column_;
      return before;
    }
    const_iterator& operator--() noexcept {
      --field_.column_;
      return *this;
    }
    const_iterator& operator+=(difference_type n) noexcept {
      field_.column_ += n;
      return *this;
    }
    friend const_iterator operator+(const_iterator it, difference_type n) noexcept { return it += n; }
    Field operator[](difference_type n) const noexcept { return *(*this + n); }
    difference_type operator-(const const_iterator& other) const noexcept {
      return field_.column_ - other.field_.column_;
    }
    bool operator==(const const_iterator& other) const noexcept {
      return field_.column_ == other.field_.column_ && field_.result_ == other.field_.result_;
    }

   private:
    friend class Row;
    explicit const_iterator(Field field) noexcept : field_(std::move(field)) {}
    Field field_{nullptr, 0, 0};
  };
  using iterator = const_iterator;

  [[nodiscard]] size_type size() const noexcept;
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] Field operator[](size_type column) const noexcept {
    return Field(result_, row_, static_cast<int>(column));
  }
  [[nodiscard]] Field operator[](int column) const noexcept { return Field(result_, row_, column); }
  // By name, as libpq's PQfnumber reads it (unquoted: case-folded); an
  // unknown name throws pqxx::argument_error.
  [[nodiscard]] Field operator[](const char* name) const;
  [[nodiscard]] Field operator[](const std::string& name) const { return (*this)[name.c_str()]; }
  // Checked: a column number out of range throws pqxx::range_error.
  [[nodiscard]] Field at(size_type column) const;
  [[nodiscard]] Field at(const std::string& name) const { return (*this)[name.c_str()]; }
  [[nodiscard]] size_type column_number(const char* name) const;
  [[nodiscard]] size_type column_number(const std::string& name) const { return column_number(name.c_str()); }
  [[nodiscard]] pqxx::result_size_type rownumber() const noexcept { return static_cast<pqxx::result_size_type>(row_); }

  [[nodiscard]] const_iterator begin() const noexcept { return const_iterator(Field(result_, row_, 0)); }
  [[nodiscard]] const_iterator end() const noexcept {
    return const_iterator(Field(result_, row_, static_cast<int>(size())));
  }
  [[nodiscard]] const_iterator cbegin() const noexcept { return begin(); }
  [[nodiscard]] const_iterator cend() const noexcept { return end(); }

 private:
  friend class Rows;
  Row(detail::Result result, int row) noexcept : result_(std::move(result)), row_(row) {}

  detail::Result result_;
  int row_ = 0;
};

class Rows {
 public:
  using size_type = pqxx::result_size_type;
  using difference_type = pqxx::result_difference_type;

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = Row;
    using difference_type = Rows::difference_type;
    using pointer = const Row*;
    using reference = const Row&;

    const_iterator() = default;
    reference operator*() const noexcept { return row_; }
    pointer operator->() const noexcept { return &row_; }
    const_iterator& operator++() noexcept {
      ++row_.row_;
      return *this;
    }
    const_iterator operator++(int) noexcept {
      const_iterator before = *this;
      ++row_.row_;
      return before;
    }
    const_iterator& operator--() noexcept {
      --row_.row_;
      return *this;
    }
    const_iterator& operator+=(difference_type n) noexcept {
      row_.row_ += static_cast<int>(n);
      return *this;
    }
    friend const_iterator operator+(const_iterator it, difference_type n) noexcept { return it += n; }
    Row operator[](difference_type n) const noexcept { return *(*this + n); }
    difference_type operator-(const const_iterator& other) const noexcept { return row_.row_ - other.row_.row_; }
    bool operator==(const const_iterator& other) const noexcept {
      return row_.row_ == other.row_.row_ && row_.result_ == other.row_.result_;
    }

   private:
    friend class Rows;
    explicit const_iterator(Row row) noexcept : row_(std::move(row)) {}
    Row row_{nullptr, 0};
  };
  using iterator = const_iterator;

  // No result: no rows and no columns.
  Rows() = default;
  // Takes a result libpq returned (null: none); the last copy PQclears it.
  explicit Rows(pg_result* result);

  [[nodiscard]] size_type size() const noexcept;
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] Row operator[](size_type row) const noexcept { return Row(result_, static_cast<int>(row)); }
  // Checked: a row number out of range throws pqxx::range_error.
  [[nodiscard]] Row at(size_type row) const;
  [[nodiscard]] Row front() const noexcept { return (*this)[0]; }
  [[nodiscard]] Row back() const noexcept { return (*this)[size() - 1]; }
  [[nodiscard]] const_iterator begin() const noexcept { return const_iterator(Row(result_, 0)); }
  [[nodiscard]] const_iterator end() const noexcept { return const_iterator(Row(result_, static_cast<int>(size()))); }
  [[nodiscard]] const_iterator cbegin() const noexcept { return begin(); }
  [[nodiscard]] const_iterator cend() const noexcept { return end(); }

  [[nodiscard]] pqxx::row_size_type columns() const noexcept;
  // Out of range: pqxx::range_error.
  [[nodiscard]] const char* column_name(pqxx::row_size_type column) const;
  // The column's type OID; out of range: pqxx::argument_error.
  [[nodiscard]] pqxx::oid column_type(pqxx::row_size_type column) const;
  [[nodiscard]] pqxx::oid column_type(int column) const {
    return column_type(static_cast<pqxx::row_size_type>(column));
  }
  [[nodiscard]] pqxx::oid column_type(const std::string& name) const { return column_type(column_number(name)); }
  // As libpq's PQfnumber reads the name; unknown: pqxx::argument_error.
  [[nodiscard]] pqxx::row_size_type column_number(const char* name) const;
  [[nodiscard]] pqxx::row_size_type column_number(const std::string& name) const { return column_number(name.c_str()); }
  // Rows an INSERT, UPDATE, DELETE... touched (its command tag's count); 0
  // for a statement without one.
  [[nodiscard]] size_type affected_rows() const;

 private:
  detail::Result result_;
};

}  // namespace shardkit::pg
