// Small helpers shared by the test suites (tests may use the STL; the library does not).
#pragma once
#include <string>
#include <vector>
#include "hetero.h"

namespace test {

inline void append_to_string(void* user, const char* data, size_t size) {
    static_cast<std::string*>(user)->append(data, size);
}

// A dense desc of `type` with these dims.
inline tessel::TensorDesc make_desc(tessel::ElementType type, const std::vector<int64_t>& dims) {
    tessel::TensorDesc d;
    d.type = type;
    d.rank = (uint8_t)dims.size();
    for (size_t i = 0; i < dims.size(); ++i) d.dims[i] = dims[i];
    return d;
}

inline std::string to_string(tessel::StringView s) { return std::string(s.data, s.size); }

// Reads a graph from text; the status is returned, the message kept in the graph.
inline tessel::Status read(const std::string& text, tessel::Graph* graph) {
    return tessel::read_text(tessel::StringView(text.data(), text.size()), graph);
}

inline std::string write(const tessel::Graph& graph) {
    std::string out;
    tessel::Status status = tessel::write_text(graph, append_to_string, &out);
    if (status != tessel::Status::Ok) return "error: " + std::string(graph.last_error());
    return out;
}

}  // namespace test
