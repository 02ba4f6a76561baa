@vertex fn v() -> @builtin(position) vec4<f32> { return vec4<f32>(0.0); }
